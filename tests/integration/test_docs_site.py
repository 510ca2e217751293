"""The docs site as a reader meets it: built with ``mkdocs build --strict``, served on 127.0.0.1,
opened in a real headless Chromium driven over the DevTools protocol (``--remote-debugging-pipe``:
JSON messages on file descriptors 3 and 4, no library between). A query typed into the search box
key by key finds pages, nothing is fetched from anywhere but the site (a cluster's login node has
no internet; a font or a search language file fetched from a CDN leaves the search at
"Initializing search" there), and the pages a newcomer lives in draw: their screenshots decode as
PNGs that are not blank."""

from __future__ import annotations

import base64
import fcntl
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_goodput import colours, decode_png

REPO = Path(__file__).resolve().parents[2]
WIDTH, HEIGHT = 1280, 1000


class Browser:
    """One headless Chromium and one page in it, spoken to over the DevTools pipe."""

    def __init__(self, profile: Path) -> None:
        found = shutil.which("chromium")
        assert found, "chromium is not installed: run scripts/test.sh (as root it installs it)"
        to_browser, self._to_browser = os.pipe()
        self._from_browser, from_browser = os.pipe()
        # the browser's ends above 9 first, so that moving them to 3 and 4 overwrites neither
        to_browser, from_browser = (self._above_9(to_browser), self._above_9(from_browser))
        # the protocol wants the browser's ends as its fds 3 (it reads) and 4 (it writes)
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser} '
                           f'{to_browser}<&- {from_browser}>&-',
             found, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--remote-debugging-pipe", f"--user-data-dir={profile}", "--no-first-run",
             f"--window-size={WIDTH},{HEIGHT}", "about:blank"],
            pass_fds=(to_browser, from_browser), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._next_id, self.events = b"", 0, []  # type: list[dict[str, Any]]
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Network"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=WIDTH,
                  height=HEIGHT, deviceScaleFactor=1, mobile=False)

    @staticmethod
    def _above_9(fd: int) -> int:
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
        os.close(fd)
        return moved

    def _message(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 16)
            assert chunk, "chromium closed the DevTools pipe"
            self._buffer += chunk
        one, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(one)  # type: ignore[no-any-return]

    def call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._message()
            if answer.get("id") == self._next_id:
                assert "error" not in answer, (method, answer["error"])
                return answer.get("result", {})  # type: ignore[no-any-return]
            self.events.append(answer)

    def js(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", session=True, expression=expression,
                           returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.2)
        pytest.fail(f"{what}: not after {timeout:.0f}s")

    def open(self, url: str) -> None:
        self.call("Page.navigate", session=True, url=url)
        self.wait_for("document.readyState === 'complete' && !!document.querySelector("
                      "'.md-content')", f"{url} loaded")

    def click(self, selector: str) -> None:
        box = self.js(f"(() => {{ const r = document.querySelector({selector!r})"
                      ".getBoundingClientRect(); return [r.x + r.width / 2, "
                      "r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", session=True, type=kind, x=box[0], y=box[1],
                      button="left", clickCount=1)

    def type(self, text: str) -> None:
        for char in text:
            self.call("Input.dispatchKeyEvent", session=True, type="keyDown", text=char,
                      key=char, unmodifiedText=char)
            self.call("Input.dispatchKeyEvent", session=True, type="keyUp", key=char)

    def screenshot(self) -> bytes:
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        return base64.b64decode(data)

    def requested(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events
                if e.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)
        os.close(self._to_browser)
        os.close(self._from_browser)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site built strict, served on 127.0.0.1 (a port the kernel picks) while the tests run."""
    out = tmp_path_factory.mktemp("site")
    mkdocs = Path(sys.executable).with_name("mkdocs")
    proc = subprocess.run([str(mkdocs), "build", "--strict", "--quiet", "-d", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(out)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture()
def browser(tmp_path: Path) -> Iterator[Browser]:
    opened = Browser(tmp_path / "profile")
    yield opened
    opened.close()


def drawn(png: bytes, what: str) -> None:
    """``png`` is a PNG of the window's size with something on it: not one colour, and text."""
    width, height, bpp, pixels = decode_png(png)
    assert (width, height) == (WIDTH, HEIGHT), (what, width, height)
    counts = colours(width, height, bpp, pixels)
    background = max(counts, key=counts.__getitem__)
    assert counts[background] < 0.97 * width * height, f"{what}: a blank page"
    assert len(counts) > 20, f"{what}: {len(counts)} colours, no text drawn"


def off_site(requested: list[str], site: str) -> list[str]:
    return [url for url in requested if not url.startswith((site, "data:", "blob:"))]


def test_search_finds_pages_typed_into_the_search_box(site: str, browser: Browser,
                                                     tmp_path: Path) -> None:
    browser.open(f"{site}/")
    meta = ".md-search-result__meta"
    browser.click(".md-search__input")
    browser.type("preemption")
    found = browser.wait_for(
        "(() => { const items = document.querySelectorAll('.md-search-result__item');"
        " return items.length ? Array.from(items, i => i.innerText.slice(0, 200)) : null; })()",
        "search results for 'preemption' (the search stayed at "
        f"{browser.js(f'document.querySelector({meta!r}).innerText')!r})")
    assert any("SLURM" in text or "preempt" in text.lower() for text in found), found
    said = browser.js(f"document.querySelector({meta!r}).innerText")
    assert "matching" in said.lower(), said
    png = browser.screenshot()
    (tmp_path / "search.png").write_bytes(png)
    drawn(png, "the search results")
    assert not off_site(browser.requested(), site), off_site(browser.requested(), site)


@pytest.mark.parametrize(("page", "heading"), [
    ("clusters/slurm/", "SLURM"),
    ("reference/cli/", "CLI"),
    ("reference/job/", "Job spec"),
])
def test_the_pages_a_newcomer_reads_draw(site: str, browser: Browser, tmp_path: Path,
                                         page: str, heading: str) -> None:
    browser.open(f"{site}/{page}")
    title = browser.js("document.querySelector('.md-content h1').innerText")
    assert title.startswith(heading), title
    wide = browser.js("Array.from(document.querySelectorAll('.md-content pre > code'))"
                      ".filter(c => c.scrollWidth > c.clientWidth + 1).length")
    assert wide == 0, f"{page}: {wide} code block(s) cut off at the right edge"
    png = browser.screenshot()
    (tmp_path / "page.png").write_bytes(png)
    drawn(png, page)
    assert not off_site(browser.requested(), site), off_site(browser.requested(), site)
