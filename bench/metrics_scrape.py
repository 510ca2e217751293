"""How long does ``fsdp-orch metrics --serve`` take to answer a scrape of 1,000 ended jobs?

Builds an index of ``--jobs`` ended jobs in a temporary home (each the unit tests' made-up job of
``tests/synthetic_jobs.py``: a hang, a crash, two restarts, a straggler and refused connections,
22 series a job, more than a clean job has), serves it on loopback as ``metrics --serve`` does,
and times ``--scrapes`` scrapes as Prometheus asks for them (gzip). The baseline, in the same
run: ``fsdp-orch status --json`` of the same index (the command a pipeline would run instead).
Target (issue 47): a scrape under 0.5 s.

    .venv/bin/python bench/metrics_scrape.py [--jobs 1000] [--scrapes 5]
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from fsdp_orch.places.home import store_path
from fsdp_orch.prometheus.collector import registry
from fsdp_orch.prometheus.serve import serve
from fsdp_orch.record.store import Store

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from synthetic_jobs import T0, two_restarts  # noqa: E402 (the tests' own made-up job)


def timed(call, times: int) -> tuple[list[float], list[float]]:  # type: ignore[no-untyped-def]
    walls, cpus = [], []
    for _ in range(times):
        start, cpu = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return walls, cpus


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--scrapes", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as work:
        home = os.path.join(work, "home")
        os.makedirs(home, mode=0o700)
        with Store(store_path(home)) as store:
            store.conn.execute("PRAGMA synchronous = OFF")
            for n in range(args.jobs):
                store.put(two_restarts(f"job-{n:05d}", T0 + n))
        server, port = serve("127.0.0.1", 0, registry(home))
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                         headers={"Accept-Encoding": "gzip"})
        sizes = []

        def scrape() -> None:
            with urllib.request.urlopen(request, timeout=30) as reply:
                sizes.append(len(gzip.decompress(reply.read())))

        def status_json() -> None:
            subprocess.run([sys.executable, "-m", "fsdp_orch", "status", "--json"], check=True,
                           env={**os.environ, "FSDP_ORCH_HOME": home}, stdout=subprocess.DEVNULL)

        try:
            scrape()  # the first: the index opened and its schema checked once
            walls, cpus = timed(scrape, args.scrapes)
            base_walls, _ = timed(status_json, args.scrapes)
        finally:
            server.shutdown()
    wall, cpu, base = (statistics.median(walls), statistics.median(cpus),
                       statistics.median(base_walls))
    print(f"{args.jobs} ended jobs, {sizes[-1] / 1e6:.1f} MB of exposition a scrape")
    print(f"scrape:        wall {wall:.3f} s (median of {args.scrapes}), CPU {cpu:.3f} s; "
          f"target 0.5 s: {'met' if wall < 0.5 else 'missed'}")
    print(f"status --json: wall {base:.3f} s (the same index, a process)")
    print(f"ratio scrape / status --json: {wall / base:.2f}; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
