"""A running job whose submission event file is emptied (damaged by hand, or a disk that lost it)
is still found by its run folder: ``status`` lists it BROKEN naming the file, and ``cancel`` stops
it (issue 42: both answered "no job with id" while its supervisor kept running)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from cli_harness import UNTIL_STOPPED, Cli, demo_args
from status_is_fold import CHECKED

from fsdp_orch.observe.proctree import job_processes
from fsdp_orch.record.broken import SETTLED_S


def test_a_job_whose_submission_event_is_emptied_is_listed_broken_and_can_be_cancelled(
        cli: Cli, demo: Path) -> None:
    CHECKED.add(id(cli))  # its status is not the fold of its events, on purpose: they are damaged
    job_id = cli.run("submit", "--cluster", "local", str(demo), "--set", demo_args(*UNTIL_STOPPED),
                     check=True).stdout.strip()
    status = cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 3,
                            timeout=180, what="three steps")
    [submit_file] = (Path(status["run_dir"]) / "events").glob("submit-*.jsonl")
    submit_file.write_text("")  # damaged
    (cli.home / "jobs.db").unlink()  # and the index rebuilt from the run folders
    time.sleep(SETTLED_S + 1)
    listed = {job["id"]: job for job in json.loads(cli.run("status", "--json", check=True).stdout)}
    assert job_id in listed, listed.keys()
    broken = listed[job_id]
    assert broken["state"] == "BROKEN" and str(submit_file) in broken["reason"], broken
    assert f"fsdp-orch cancel {job_id}" in broken["reason"], broken
    assert job_processes(job_id), "the job goes on meanwhile"
    assert "cancelled" in cli.run("cancel", job_id, check=True).stdout
    ended = cli.wait_until(job_id, lambda s: s["state"] == "CANCELLED", timeout=60,
                           what="the cancel")
    assert ended["state"] == "CANCELLED"
    deadline = time.monotonic() + 30
    while job_processes(job_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job_processes(job_id) == []
