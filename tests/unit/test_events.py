"""The per-job event log and the index built from it: one writer per file, torn and garbage lines,
incremental reading by byte offset, and a database that can be deleted and rebuilt."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fsdp_orch.places.home import on_network_filesystem, store_path
from fsdp_orch.record.events import EventWriter, event_files, parse_lines, read_from, read_job
from fsdp_orch.record.index import JobIndex
from fsdp_orch.record.journal import Journal, read_status
from fsdp_orch.record.store import Store
from fsdp_orch.vocab.states import JobState


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def a_job(runs: Path, job_id: str = "abc123",
          clock: Clock | None = None) -> tuple[Journal, Journal]:
    """A submitted job whose supervisor ran two attempts: the first hung, the second succeeded."""
    clock = clock or Clock()
    run_dir = runs / job_id
    cli = Journal(EventWriter(run_dir, "submit", clock=clock), job_id)
    cli.submitted(name="demo", cluster="local", kind="local", spec_json="{}", run_dir=str(run_dir),
                  job_file="/jobs/job.yaml", spec_hash="h", idempotency_key=None)
    sup = Journal(EventWriter(run_dir, "supervisor", clock=clock), job_id)
    sup.supervisor_started(pid=4242)
    sup.start_attempt(0, resume_from=None)
    sup.launched(0, "pgid:4243")
    sup.progress(10, 2.5, clock.now)
    sup.checkpoint(10)
    sup.add_failure(attempt=0, category="hang", evidence="rank 1 stuck at train.py:57",
                    action="restart", stalled_for_s=12.0)
    sup.end_attempt(0, -9)
    sup.restart_scheduled("restart 1 of 3 after hang", 1.0)
    sup.start_attempt(1, resume_from="/ck/step-10")
    sup.add_event(attempt=1, kind="checkpoint_moved_aside", message="moved")
    sup.progress(20, float("nan"), clock.now)
    sup.end_attempt(1, 0)
    sup.set_state(JobState.SUCCEEDED)
    return cli, sup


def index_of(tmp_path: Path, db: str = "jobs.db") -> JobIndex:
    return JobIndex(Store(tmp_path / db), [str(tmp_path / "runs")], warn=lambda text: None)


def test_each_writer_has_its_own_file_and_the_submission_is_read_first(tmp_path: Path) -> None:
    a_job(tmp_path / "runs")
    names = [os.path.basename(p) for p in event_files(tmp_path / "runs" / "abc123")]
    assert len(names) == 2 and names[0].startswith("submit-") and names[1].startswith("supervisor-")
    events, warnings = read_job(tmp_path / "runs" / "abc123")
    assert warnings == [] and events[0]["kind"] == "submitted" and events[-1]["kind"] == "finished"
    assert [e["at"] for e in events] == sorted(e["at"] for e in events)


def test_a_torn_last_line_waits_and_a_garbage_line_is_skipped_with_its_place(
        tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    path.write_bytes(b'{"at": 1, "kind": "a"}\nnot json at all\n{"at": 2, "kind": "b"}\n'
                     b'{"at": 3, "ki')
    first = read_from(str(path))
    assert [e["kind"] for e in first.events] == ["a", "b"]
    assert first.warnings == [f"{path}:2: skipped a line that is not an event"]
    assert first.line == 3 and first.offset == path.read_bytes().rindex(b"\n") + 1
    with open(path, "ab") as f:  # the writer finishes its line
        f.write(b'nd": "c"}\n{"kind": "no time"}\n')
    second = read_from(str(path), first.offset, first.line)
    assert [e["kind"] for e in second.events] == ["c"]
    assert second.warnings == [f"{path}:5: skipped a line that is not an event"]
    assert parse_lines(b"", "x", 0) == ([], 0, 0, [])


def test_the_index_reads_only_what_was_appended(tmp_path: Path) -> None:
    clock = Clock()
    run_dir = tmp_path / "runs" / "j1"
    cli = Journal(EventWriter(run_dir, "submit", clock=clock), "j1")
    cli.submitted(name="n", cluster="local", kind="local", spec_json="{}", run_dir=str(run_dir),
                  job_file=None, spec_hash=None, idempotency_key=None)
    index = index_of(tmp_path)
    index.ingest()
    assert index.store.job("j1").state == "PENDING"
    sup = Journal(EventWriter(run_dir, "supervisor", clock=clock), "j1")
    sup.add_failure(attempt=0, category="hang", evidence="e", action="restart")
    index.ingest(["j1"])
    index.ingest(["j1"])  # nothing new: the failure is not counted twice
    assert len(json.loads(index.store.status_json("j1"))["failures"]) == 1


def test_deleting_the_database_loses_nothing(tmp_path: Path) -> None:
    a_job(tmp_path / "runs")
    first = index_of(tmp_path, "one.db")
    first.ingest()
    before = json.loads(first.store.status_json("abc123"))
    assert before["state"] == "SUCCEEDED" and before["attempts"] == 2 and before["restarts"] == 1
    # NaN shows as null
    assert before["progress"]["step"] == 20 and before["progress"]["loss"] is None
    assert before["last_checkpoint_step"] == 10 and before["failures"][0]["category"] == "hang"
    rebuilt = index_of(tmp_path, "two.db")  # a fresh database: as after `rm jobs.db`
    rebuilt.ingest()
    assert json.loads(rebuilt.store.status_json("abc123")) == before


def test_a_second_login_node_sees_the_same_jobs(tmp_path: Path) -> None:
    first, second = index_of(tmp_path, "login1.db"), index_of(tmp_path, "login2.db")
    first.ingest()
    a_job(tmp_path / "runs", "late")  # submitted after the first look
    first.ingest()
    second.ingest()
    assert first.store.job_ids() == second.store.job_ids() == {"late"}
    assert first.store.job("late").state == second.store.job("late").state == "SUCCEEDED"


def test_the_supervisors_own_view_of_the_job(tmp_path: Path) -> None:
    a_job(tmp_path / "runs")
    view = read_status(str(tmp_path / "runs" / "abc123"), "abc123")
    assert view is not None and view.state == "SUCCEEDED" and view.ended
    assert (sorted(view.attempt_records) == [0, 1]
            and view.attempt_records[1].resume_from == "/ck/step-10")
    assert [(f.attempt, f.action) for f in view.failures] == [(0, "restart")]
    assert view.backend_ref == "pgid:4243" and view.supervisor_pid == 4242


def test_the_database_moves_to_a_local_path_when_home_is_on_nfs(tmp_path: Path,
                                                                monkeypatch) -> None:
    monkeypatch.delenv("FSDP_ORCH_DB", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    mounts = ("/dev/sda1 / ext4 rw 0 0\n"
              "nfs.example:/home /shared/home nfs4 rw,relatime 0 0\n")
    assert on_network_filesystem("/shared/home/alice/.fsdp-orch", mounts)
    assert not on_network_filesystem("/var/tmp/x", mounts)
    local = store_path("/shared/home/alice/.fsdp-orch", mounts)
    assert local.startswith(str(tmp_path / "xdg")) and local.endswith("jobs.db")
    assert store_path("/var/tmp/x", mounts) == "/var/tmp/x/jobs.db"
    monkeypatch.setenv("FSDP_ORCH_DB", str(tmp_path / "mine.db"))
    assert store_path("/shared/home/alice/.fsdp-orch", mounts) == str(tmp_path / "mine.db")


def test_fsdp_orch_events_prints_in_time_order_and_follow_stops_at_the_end(tmp_path: Path) -> None:
    import io

    from fsdp_orch.cli.event_lines import show_events

    a_job(tmp_path / "runs")
    out, naps = io.StringIO(), []
    show_events(str(tmp_path / "runs" / "abc123"), as_json=True, follow=True, out=out,
                sleep=naps.append)
    kinds = [json.loads(line)["kind"] for line in out.getvalue().splitlines()]
    assert kinds[0] == "submitted" and kinds[-1] == "finished" and len(kinds) == 14
    assert naps == []  # the job had already finished: nothing to wait for
