"""For every job the tests make: what ``fsdp-orch status --json`` lists equals ``fold`` of the job's
event logs, read afresh (with a running job's live step folded in, as status reads it). Run after
each test over the CLIs (homes) it used, through each CLI's own prefix and environment (a login
node in its own mount namespace sees its own files)."""

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
from fsdp_orch.record.store import with_live
out = {}
for run_dir, job_id in zip(sys.argv[1::2], sys.argv[2::2]):
    sizes = {p: os.path.getsize(p) for p in event_files(run_dir)}
    status = fold_lines(read_job(run_dir)[0], job_id)
    status = status if status is None else with_live(status)
    out[job_id] = {"sizes": sizes, "doc": None if status is None else status.to_json()}
print(json.dumps(out))
"""

CLIS: list[Any] = []  # every Cli made in this session, in order
# (job id, message) of each straggler named in the jobs ``mismatches`` listed since it was cleared:
# no healthy run of the suite may name one (issue 45); tests that slow a rank are marked straggler
STRAGGLERS_NAMED: list[tuple[str, str]] = []
CHECKED: set[int] = set()  # id() of those a test checks itself (the after-test check leaves them)


def _listing(cli: Any) -> list[dict[str, Any]]:
    proc = cli.run("status", "--json", timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"status --json exited {proc.returncode}: {proc.stderr}")
    return json.loads(proc.stdout)


def _fold_here(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    import os

    from fsdp_orch.record.events import event_files, read_job
    from fsdp_orch.record.fold import fold_lines
    from fsdp_orch.record.store import with_live

    out = {}
    for job in jobs:
        sizes = {p: os.path.getsize(p) for p in event_files(job["run_dir"])}
        status = fold_lines(read_job(job["run_dir"])[0], job["id"])
        status = status if status is None else with_live(status)  # as status reads a running one
        out[job["id"]] = {"sizes": sizes, "doc": None if status is None else status.to_json()}
    return out


def _folds(cli: Any, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    # the CLI sees the files this process sees: fold them here (no process start)
    if not cli.prefix:
        return _fold_here(jobs)
    args = [word for job in jobs for word in (job["run_dir"], job["id"])]
    proc = subprocess.run([*cli.prefix, sys.executable, "-c", FOLD, *args], cwd=cli.cwd,
                          env=cli.env, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"folding the event logs failed: {proc.stderr}")
    return json.loads(proc.stdout)


def _same(folded: dict[str, Any] | None, listed: dict[str, Any]) -> bool:
    """The fold's document and the listed one agree, but for what status computes at read time
    with the clock (how long a running job has been stalled)."""
    if folded is None:
        return False
    return {**folded, "stalled_for_s": None} == {**listed, "stalled_for_s": None}


def mismatches(cli: Any, tries: int = 6) -> list[str]:
    """The jobs whose listed status is not the fold of their logs, among those whose logs did not
    move while they were listed (read before and after the listing) ([] when all agree)."""
    if not cli.home.exists():
        return []  # this CLI never ran
    jobs = _listing(cli)
    if not jobs:
        return []
    STRAGGLERS_NAMED.extend((job["id"], event["message"]) for job in jobs
                            for event in job.get("events") or () if event["kind"] == "straggler")
    # Most tests end with their jobs ended and their logs still: one listing that equals the fold
    # settles it. Anything else goes through the careful loop below.
    quick = _folds(cli, jobs)
    if all(_same(quick[job["id"]]["doc"], job) for job in jobs):
        return []
    wrong: list[str] = []
    for _ in range(tries):
        jobs = _listing(cli)
        if not jobs:
            return []
        before = _folds(cli, jobs)
        listed = {job["id"]: job for job in _listing(cli)}
        after = _folds(cli, jobs)
        wrong, moving = [], False
        for job_id, fold in after.items():
            if before[job_id]["sizes"] != fold["sizes"] or job_id not in listed:
                moving = True
                continue
            if not _same(fold["doc"], listed[job_id]):
                wrong.append(f"{job_id}: status --json {json.dumps(listed[job_id])}\n"
                             f"    fold(events) {json.dumps(fold['doc'])}")
        if not wrong and not moving:
            return []
        time.sleep(1.0)
    return wrong
