"""The supervisor's metrics textfile (``supervise.metrics_textfile``): written at the first look,
then no more often than every EVERY_S, with the job's figures folded from its event log and the
longest time between two looks since the last write; off without its environment variable."""

from __future__ import annotations

import os
import stat

from prometheus_client.parser import text_string_to_metric_families

from fsdp_orch.places.builtin import METRICS_TEXTFILE_ENV
from fsdp_orch.record.events import EventWriter
from fsdp_orch.record.journal import Journal
from fsdp_orch.supervise.metrics_textfile import EVERY_S, POLL_METRIC, MetricsTextfile
from fsdp_orch.vocab.states import JobState


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def values(path: str) -> dict[str, float]:
    with open(path, encoding="utf-8") as f:
        return {s.name: s.value for family in text_string_to_metric_families(f.read())
                for s in family.samples}


def test_written_at_the_first_look_then_every_15_s_and_at_the_end(tmp_path):
    run_dir, out = tmp_path / "run", tmp_path / "textfile"
    out.mkdir()
    clock = Clock()
    journal = Journal(EventWriter(run_dir, "supervisor", clock=clock), "j1")
    journal.submitted(name="demo", cluster="local", kind="local", spec_json="{}",
                      run_dir=str(run_dir), job_file=None, spec_hash=None, idempotency_key=None,
                      now=clock.now)
    journal.start_attempt(0, resume_from=None, now=clock.now + 1)
    clock.now += 2
    textfile = MetricsTextfile.from_environ(str(run_dir), "j1", clock,
                                            environ={METRICS_TEXTFILE_ENV: str(out)})
    assert textfile is not None
    textfile.look(0)
    path = out / "fsdp_orch_job_j1.prom"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert values(str(path))["fsdp_orch_job_state"] == 1
    first = os.stat(path).st_ino
    for pause in (1.0, 3.0, 1.0):  # the loop's looks, one slow
        clock.now += pause
        textfile.look(0)
    assert os.stat(path).st_ino == first, "not written again within EVERY_S"
    clock.now += EVERY_S
    textfile.look(1)  # the next attempt's first look: the time between attempts is not a look's
    assert values(str(path))[POLL_METRIC] == 3.0, "the longest time between two looks"
    journal.set_state(JobState.SUCCEEDED, now=clock.now)
    textfile.write()
    with open(path, encoding="utf-8") as f:
        assert 'state="SUCCEEDED"' in f.read()
    assert os.listdir(out) == ["fsdp_orch_job_j1.prom"]


def test_off_without_its_variable_and_a_failed_write_is_said_once(tmp_path, caplog):
    assert MetricsTextfile.from_environ(str(tmp_path), "j1", Clock(), environ={}) is None
    run_dir = tmp_path / "run"
    clock = Clock()
    Journal(EventWriter(run_dir, "submit", clock=clock), "j1").submitted(
        name="demo", cluster="local", kind="local", spec_json="{}", run_dir=str(run_dir),
        job_file=None, spec_hash=None, idempotency_key=None)
    told: list[str] = []
    textfile = MetricsTextfile(str(tmp_path / "missing"), str(run_dir), "j1", clock,
                               tell=told.append)
    textfile.write()
    textfile.write()
    said = caplog.messages  # the supervisor's log (vocab.process_log: its stdout)
    assert len(said) == 1 and "cannot write the metrics to" in said[0], said
    assert len(told) == 1 and told[0].startswith("cannot write the metrics to"), told  # the job's
    # events hear it once too
