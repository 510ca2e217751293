"""Goodput of a real local job with three faults (a crash, a SIGKILL, a hang, one per attempt): the
breakdown in ``status --json`` adds up to the wall time, ``status ID`` says it, and ``report``
writes a private page whose figures are the same, which a real headless Chromium draws and reads
back."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from cli_harness import check_goodput

pytestmark = pytest.mark.slow

STEPS = 32
FAULTS = "crash:step=8:rank=1:attempt=0;kill:step=16:rank=0:attempt=1;hang:step=24:rank=1:attempt=2"
SETTINGS = [
    # the default model: the saves must stay a small part of the productive time
    "--set", f"args=[--steps, {STEPS}]",
    "--set", "checkpoint.interval=5",
    "--set", "restart.backoff.initial=1s",
    "--set", "restart.backoff.jitter=0",
    "--set", "watch.heartbeat_timeout=6s",
    "--set", "watch.startup_timeout=90s",
    "--set", f"env.FSDP_ORCH_FAULT={FAULTS}",
]


@pytest.fixture(scope="module")
def three_faults(module_cli_and_demo):
    """A job that survives three faults: its CLI, id and ``status --json``."""
    cli, demo = module_cli_and_demo
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(demo), *SETTINGS,
                   timeout=600)
    assert proc.returncode == 0, proc.stderr
    job_id = json.loads(proc.stdout)["id"]
    status = json.loads(cli.run("status", job_id, "--json").stdout)
    return cli, job_id, status


def test_three_faults_add_up_to_the_wall_time(three_faults):
    _, _, status = three_faults
    assert status["state"] == "SUCCEEDED" and status["attempts"] == 4, status
    assert [f["category"] for f in status["failures"]] == [
        "injected_fault", "injected_fault", "hang"]
    g = check_goodput(three_faults[0], status)
    assert sum(g["percent"].values()) == pytest.approx(100, abs=1)
    assert 0 < g["goodput_pct"] < 100 and g["goodput_pct"] == pytest.approx(
        100 * g["seconds"]["productive"] / g["wall_s"], abs=0.01)
    s = g["seconds"]
    # The hang's stall, as the watchdog measured it under the window in force, is detection; the two
    # crashes add their last step to the verdict (the exit seen at the next poll).
    stall = status["failures"][2]["stalled_for_s"]
    assert 2 * 0.9 <= stall <= 6 * 1.5, "past the 2s floor, at most the 6s ceiling and a poll"
    assert stall <= s["detection"] <= stall + 5, (s["detection"], stall)
    # The backoff runs from each verdict: teardown (verdict to attempt end) and restart (to the next
    # start) hold it.
    assert s["teardown"] + s["restart"] >= 3 * 1.0, ("three restarts, each at least a 1s backoff "
                                                     "after its verdict")
    assert s["restart"] > 0
    assert s["startup"] > 0 and s["queue"] > 0 and s["teardown"] > 0
    assert s["lost_work"] > 0, ("the crash at step 8 resumes from step 5: steps 6-8 are "
                                "trained again")
    assert 0 < s["checkpoint"] < s["productive"], ("the runtime's saves every 5 steps "
                                                   "held training up")
    # what nothing explains is only the float tail, here
    assert abs(s["unaccounted"]) < 0.01, g
    assert g["largest_loss"]["bucket"] != "productive"


def test_status_id_shows_the_goodput_and_the_largest_loss(three_faults):
    cli, job_id, status = three_faults
    out = cli.run("status", job_id).stdout
    g = status["goodput"]
    line = next(line for line in out.splitlines() if line.startswith("goodput: "))
    loss = g["largest_loss"]
    assert line.startswith(f"goodput: {g['goodput_pct']:.1f}% of ")
    assert line.endswith(f"(largest loss: {loss['bucket']} {loss['seconds']:.1f}s)"), line


def test_report_writes_a_private_page_with_the_status_figures(three_faults, tmp_path):
    cli, job_id, status = three_faults
    out = tmp_path / "page.html"
    proc = cli.run("report", job_id, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    page = out.read_text()
    assert not re.search(r"<[^>]*\s(src|href|srcset)\s*=", page), "the page fetches nothing"
    assert "<script" not in page
    g = status["goodput"]
    for bucket, seconds in g["seconds"].items():
        assert (f"data-bucket='{bucket}' data-seconds='{seconds!r}' "
                f"data-percent='{g['percent'][bucket]!r}'") in page
    assert f"data-goodput-pct='{g['goodput_pct']!r}'" in page
    assert page.count("class='failure'") == 3 and page.count('class="verdict"') == 3
    assert page.count('class="attempt"') == 4 and page.count('class="gap"') == 3
    # every loss the demo printed (``step=N loss=L``, each step, in each attempt) is a point of
    # the curve; the event log's progress (one per 5 s) would give a few
    drawn = {(int(step), round(float(loss), 6)) for step, loss in
             re.findall(r'class="loss-point" data-attempt="\d+" data-step="(\d+)" '
                        r'data-loss="([^"]+)"', page)}
    # the ended attempts' logs are archived (.gz: these are under the size that trims them)
    run_dir = Path(status["run_dir"])
    texts = [*(log.read_text(errors="replace") for log in run_dir.rglob("*.log")),
             *(gzip.decompress(log.read_bytes()).decode(errors="replace")
               for log in run_dir.rglob("*.log.gz"))]
    printed = {(int(step), float(loss)) for text in texts
               for step, loss in re.findall(r"step=(\d+) loss=([0-9.]+)", text)}
    assert len(printed) >= STEPS, printed
    assert drawn == printed, (sorted(printed - drawn), sorted(drawn - printed))


def test_the_save_cadence_weighs_the_runtimes_saves_against_three_faults(three_faults, tmp_path):
    """The same job's ``save_cadence``: the runtime's measured saves, its three failures over the
    attempts' wall time, and Young's interval at that rate, in ``status ID`` and the page too."""
    import math

    cli, job_id, status = three_faults
    c, s = status["save_cadence"], status["goodput"]["seconds"]
    assert c["interval_steps"] == 5 and c["checkpoints"] >= 6, c
    assert c["save_cost_source"] == "measured" and c["save_cost_s"] > 0, c
    # the runtime's blocked seconds over the checkpoints committed: the goodput bucket's total
    assert 0 < c["save_cost_s"] * c["saves_timed"] <= s["checkpoint"] * 1.01 + 0.01, (c, s)
    assert c["failures"] == 3 and c["mtbf_observed"], c
    assert c["mtbf_s"] == pytest.approx(c["exposure_s"] / 3, abs=0.01)
    assert c["exposure_s"] <= status["goodput"]["wall_s"]
    young = math.sqrt(2 * c["save_cost_s"] * c["mtbf_s"])
    if c["best_interval_steps"] is not None:
        assert abs(c["best_interval_steps"] - young / c["step_s"]) <= 1, c
    else:
        assert c["best_interval_s"] == pytest.approx(young, rel=0.01), c
    assert c["verdict"] in ("too_sparse", "too_dense", "about_right"), c
    assert 0 < c["lost_pct_best"] <= c["lost_pct_now"], c
    line = next(x for x in cli.run("status", job_id).stdout.splitlines()
                if x.startswith("save cadence: "))
    assert line.startswith("save cadence: every 5 steps") and "measured by the runtime" in line
    assert "3 failure(s) in " in line, line
    page = tmp_path / "page.html"
    assert cli.run("report", job_id, "--out", str(page)).returncode == 0
    html = page.read_text()
    assert f"data-field='save_cost_s' data-value='{c['save_cost_s']}'" in html
    assert f"data-verdict='{c['verdict']}'" in html


def test_report_default_file_and_a_bad_id(three_faults):
    cli, job_id, _ = three_faults
    proc = cli.run("report", job_id[:8])
    assert proc.returncode == 0, proc.stderr
    written = Path(cli.cwd) / f"report-{job_id}.html"
    assert proc.stdout.strip() == written.name and written.is_file()
    bad = cli.run("report", "no-such-job")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "fsdp-orch: error: no job with id 'no-such-job' (see 'fsdp-orch status')"]


# --- the page in a real browser ----------------------------------------------------------------

def chromium() -> str:
    found = shutil.which("chromium")
    assert found, ("chromium is not installed: run scripts/test.sh (as root it installs "
                   "Debian's chromium)")
    return found


def decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """Width, height, bytes per pixel and the raw pixel rows of an 8-bit RGB or RGBA PNG (what
    Chromium writes), unfiltered."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    at, idat, header = 8, b"", None
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    assert header is not None
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = (raw[y * (stride + 1)],
                      bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)]))
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i]
                           + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, b"".join(rows)


def colours(width: int, height: int, bpp: int, pixels: bytes) -> dict[tuple[int, int, int], int]:
    counts: dict[tuple[int, int, int], int] = {}
    for at in range(0, width * height * bpp, bpp):
        rgb = (pixels[at], pixels[at + 1], pixels[at + 2])
        counts[rgb] = counts.get(rgb, 0) + 1
    return counts


def test_the_page_in_headless_chromium_draws_and_says_the_status_figures(three_faults, tmp_path):
    from fsdp_orch.report.svg import COLORS

    browser = chromium()
    cli, job_id, status = three_faults
    page = tmp_path / "page.html"
    assert cli.run("report", job_id, "--out", str(page)).returncode == 0
    shot = tmp_path / "page.png"
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              f"--user-data-dir={tmp_path / 'profile'}"]
    proc = subprocess.run([*common, f"--screenshot={shot}", "--window-size=1024,1400",
                           page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    width, height, bpp, pixels = decode_png(shot.read_bytes())
    assert (width, height) == (1024, 1400)
    counts = colours(width, height, bpp, pixels)
    background = max(counts, key=counts.__getitem__)
    assert (background == (255, 255, 255)
            and counts[background] < 0.97 * width * height), "a blank page"
    g = status["goodput"]
    for bucket, seconds in g["seconds"].items():
        rgb = tuple(int(COLORS[bucket][i:i + 2], 16) for i in (1, 3, 5))
        # each bucket with a second or more in it is drawn in the timeline's strip (and every
        # bucket has a swatch in the legend and the table: a few hundred pixels at least)
        assert counts.get(rgb,
                          0) >= (400 if seconds >= 1 else 100), ((bucket, seconds, counts.get(rgb)))

    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    rows = re.findall(r'<tr data-bucket="(\w+)" data-seconds="([^"]*)"(?: '
                      r'data-percent="([^"]*)")?>(.*?)</tr>',
                      dom.stdout, re.S)
    assert [r[0] for r in rows] == [*g["seconds"], "wall"]
    for bucket, seconds, percent, cells in rows:
        shown = re.findall(r'<t[dh] class="num">([^<]*)</t[dh]>', cells)
        if bucket == "wall":
            assert float(seconds) == g["wall_s"] and shown[0] == f"{g['wall_s']:.3f}"
            continue
        assert (float(seconds), float(percent)) == (g["seconds"][bucket], g["percent"][bucket])
        assert shown == [f"{g['seconds'][bucket]:.3f}", f"{g['percent'][bucket]:.2f}"]
    headline = re.search(r'<span class="big" id="goodput" data-goodput-pct="([^"]*)"[^>]*>goodput ('
                         r'[0-9.]+)%',
                         dom.stdout)
    assert headline is not None
    assert (float(headline.group(1)) == g["goodput_pct"]
            and headline.group(2) == f"{g['goodput_pct']:.1f}")
    assert len(re.findall(r'<tr class="failure">', dom.stdout)) == len(status["failures"]) == 3
