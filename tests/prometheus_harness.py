"""A real Prometheus and the exporters' ports, for the tests that scrape fsdp-orch's metrics
(Debian's ``prometheus``, installed by scripts/test.sh)."""

from __future__ import annotations

import collections
import json
import shutil
import socket
import time
import urllib.parse
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def installed(name: str) -> str:
    found = shutil.which(name)
    assert found, (f"{name} is not installed: run scripts/test.sh (as root it installs Debian's "
                   "prometheus and prometheus-node-exporter)")
    return found


def until(what: str, check, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
        except OSError:
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)


class Prometheus:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def query(self, promql: str) -> dict[str, list[tuple[dict, float]]]:
        """The instant vector, by scrape job: [(labels, value)]."""
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as reply:
            answer = json.load(reply)
        assert answer["status"] == "success", answer
        out: dict[str, list[tuple[dict, float]]] = collections.defaultdict(list)
        for series in answer["data"]["result"]:
            out[series["metric"].get("job", "")].append((series["metric"],
                                                         float(series["value"][1])))
        return out
