"""Folds the lines tests/suite_times.py wrote (FSDP_ORCH_TEST_TIMES=FILE) into a table: per test
file (or per test with --tests), the wall time, the set-up share of it, and how much of the wall
time the machine's cores were busy; the rest was waiting (sleeps, windows, backoff, a daemon's
start). Markdown, largest first.

    python scripts/test_times.py FILE [--tests] [--most N]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def fold(lines: list[dict], by_test: bool) -> list[dict]:
    rows: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    cores = 1
    for line in lines:
        key = line["test"] if by_test else line["test"].split("::", 1)[0]
        row = rows[key]
        row["wall_s"] += line["wall_s"]
        row["busy_cpu_s"] += line["busy_cpu_s"]
        row[f"{line['phase']}_s"] += line["wall_s"]
        row["tests"] += line["phase"] == "call"
        cores = line.get("cores") or cores
    out = []
    for key, row in rows.items():
        wall = row["wall_s"]
        busy = min(1.0, row["busy_cpu_s"] / (cores * wall)) if wall > 0 else 0.0
        out.append({"name": key, "tests": int(row["tests"]), "wall_s": wall,
                    "setup_s": row["setup_s"] + row["teardown_s"], "busy": busy})
    return sorted(out, key=lambda r: -r["wall_s"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file", type=Path)
    p.add_argument("--tests", action="store_true", help="one row per test, not per file")
    p.add_argument("--most", type=int, default=25)
    args = p.parse_args()
    lines = [json.loads(t) for t in args.file.read_text().splitlines() if t.strip()]
    rows = fold(lines, args.tests)
    total = sum(r["wall_s"] for r in rows)
    print(f"{len(rows)} {'tests' if args.tests else 'files'}, {total / 60:.1f} min of "
          "test wall time")
    workers = sorted({line.get("worker") or "" for line in lines} - {""})
    timed = [line for line in lines if "at" in line]
    if workers and timed:
        span = max(t["at"] for t in timed) - min(t["at"] - t["wall_s"] for t in timed)
        print(f"{len(workers)} pytest-xdist workers side by side: {span / 60:.1f} min from the "
              "first test's start to the last one's end; a file's cores busy counts every worker's "
              "CPU meanwhile")
    failed = sorted({line["test"] for line in lines if line.get("outcome") == "failed"})
    for test in failed:
        print(f"failed: {test}")
    print("| file | tests | wall | of all | set-up + teardown | cores busy | waiting |")
    print("|---|---|---|---|---|---|---|")
    for row in rows[:args.most]:
        print(f"| `{row['name']}` | {row['tests']} | {row['wall_s']:.0f} s | "
              f"{row['wall_s'] / total:.1%} | {row['setup_s']:.0f} s | {row['busy']:.0%} | "
              f"{row['wall_s'] * (1 - row['busy']):.0f} s |")
    busy = sum(r["wall_s"] * r["busy"] for r in rows)
    print(f"| all | {sum(r['tests'] for r in rows)} | {total:.0f} s | | "
          f"{sum(r['setup_s'] for r in rows):.0f} s | {busy / total:.0%} | {total - busy:.0f} s |")


if __name__ == "__main__":
    main()
