"""For every job the tests make: what ``fsdp-orch status --json`` lists equals ``fold`` of the job's
event logs, read afresh. Run after each test over the CLIs (homes) it used, through each CLI's own
prefix and environment (a login node in its own mount namespace sees its own files)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

# Folds each run folder given on the command line; prints, for each, the sizes of its event files
# and the status document (null before its submission is readable).
FOLD = """
import json, os, sys
from fsdp_orch.record.events import event_files, read_job
from fsdp_orch.record.fold import fold_lines
out = {}
for run_dir, job_id in zip(sys.argv[1::2], sys.argv[2::2]):
    sizes = {p: os.path.getsize(p) for p in event_files(run_dir)}
    status = fold_lines(read_job(run_dir)[0], job_id)
    out[job_id] = {"sizes": sizes, "doc": None if status is None else status.to_json()}
print(json.dumps(out))
"""

CLIS: list[Any] = []  # every Cli made in this session, in order
CHECKED: set[int] = set()  # id() of those checked already


def _listing(cli: Any) -> list[dict[str, Any]]:
    proc = cli.run("status", "--json", timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"status --json exited {proc.returncode}: {proc.stderr}")
    return json.loads(proc.stdout)


def _folds(cli: Any, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    args = [word for job in jobs for word in (job["run_dir"], job["id"])]
    proc = subprocess.run([*cli.prefix, sys.executable, "-c", FOLD, *args], cwd=cli.cwd, env=cli.env,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"folding the event logs failed: {proc.stderr}")
    return json.loads(proc.stdout)


def mismatches(cli: Any, tries: int = 6) -> list[str]:
    """The jobs whose listed status is not the fold of their logs, once their logs stopped growing
    between the listing and the fold ([] when all agree)."""
    if not cli.home.exists():
        return []  # this CLI never ran
    wrong: list[str] = []
    for _ in range(tries):
        before = {job["id"]: job for job in _listing(cli)}
        if not before:
            return []
        folds = _folds(cli, list(before.values()))
        after = _folds(cli, list(before.values()))  # the logs did not move between the two reads
        wrong = []
        moving = False
        for job_id, listed in before.items():
            if folds[job_id]["sizes"] != after[job_id]["sizes"]:
                moving = True
                continue
            if folds[job_id]["doc"] != listed:
                wrong.append(f"{job_id}: status --json {json.dumps(listed)}\n    fold(events) {json.dumps(folds[job_id]['doc'])}")
        if not wrong and not moving:
            return []
        time.sleep(1.0)
    return wrong
