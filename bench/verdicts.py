"""Hang verdicts, five runs of each scenario (issue 26), on the local cluster with 2 CPU ranks:

1. culprit first: the unchanged torchrun + FSDP2 script with rank 0 hung in user code while rank 1
   waits in a collective, and the reverse; a hit when the evidence leads with the hung rank
   (target 5/5 each);
2. a hang at a checkpoint step: the demo with rank 1 hung at step 30 while rank 0 waits inside the
   save; a hit when the verdict is ``hang`` within heartbeat_timeout + 2 s and leads with rank 1
   (target 5/5);
3. a slow save that keeps writing (40 MB at 4 MB/s from a writer thread, 2.5x the window): a hit
   when there is no verdict at all (target 5/5).

The scenarios are the ones tests/integration/test_hang_verdicts.py runs once
(tests/verdict_scenarios.py). Progress to stderr, the table (or ``--json``) to stdout; exit status 1
if a target is missed.

    .venv/bin/python bench/verdicts.py [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from cli_harness import make_cli  # noqa: E402
from verdict_scenarios import (  # noqa: E402
    culprit_first,
    hang_at_a_checkpoint_step,
    slow_save_keeps_writing,
)

SCENARIOS = {
    "culprit first, rank 0 hung": lambda cli, base: culprit_first(cli, base, 0),
    "culprit first, rank 1 hung": lambda cli, base: culprit_first(cli, base, 1),
    "hang at a checkpoint step": hang_at_a_checkpoint_step,
    "slow save keeps writing": slow_save_keeps_writing,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", help="run only the scenarios whose name contains this")
    args = parser.parse_args()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="fsdp-orch-verdicts-") as tmp:
        for name, scenario in SCENARIOS.items():
            if args.only and args.only not in name:
                continue
            hits, misses, detections, seconds = 0, [], [], []
            for run in range(args.runs):
                base = Path(tmp) / f"{name.replace(' ', '-').replace(',', '')}-{run}"
                started = time.monotonic()
                outcome = scenario(make_cli(base), base)
                seconds.append(time.monotonic() - started)
                if outcome.failure:
                    detections.append(outcome.failure.get("stalled_for_s"))
                hits += outcome.hit
                if not outcome.hit:
                    misses.append(outcome.why)
                print(f"{name} #{run + 1}: {'hit' if outcome.hit else 'MISS ' + outcome.why[:400]}",
                      file=sys.stderr, flush=True)
            results[name] = {"hits": hits, "runs": args.runs, "misses": misses,
                             "verdict_after_s": detections,
                             "wall_s": [round(s, 1) for s in seconds]}
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"{'scenario':<30} {'hits':>6}  verdict after (s)          wall (s)")
        for name, r in results.items():
            after = ", ".join(f"{d:.1f}" for d in r["verdict_after_s"] if d is not None) or "-"
            print(f"{name:<30} {r['hits']}/{r['runs']:<4}  {after:<26} "
                  f"{sum(r['wall_s']) / len(r['wall_s']):.0f}")
    return 0 if all(r["hits"] == r["runs"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
