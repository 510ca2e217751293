"""The Python API checks its arguments before it opens anything: a wrong type or value is the CLI's
InputError naming the argument (not TypeError, not sqlite3.ProgrammingError), and nothing is
submitted or written (``$FSDP_ORCH_HOME`` is not even created)."""

from __future__ import annotations

from pathlib import Path

import pytest

import fsdp_orch
from fsdp_orch.vocab.errors import InputError

JOB = "name: demo\nscript: train.py\n"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.yaml").write_text(JOB)
    monkeypatch.chdir(work)
    monkeypatch.setenv("FSDP_ORCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


SUBMITS = [  # (keyword arguments of submit("job.yaml", ...), the field named)
    ({"wait": True, "timeout": "10s"}, "timeout"),  # it submitted, then raised without the job
    ({"wait": True, "timeout": -1}, "timeout"),
    ({"wait": True, "timeout": float("nan")}, "timeout"),
    ({"wait": True, "timeout": True}, "timeout"),
    ({"timeout": 10}, "timeout"),  # without wait, as the CLI's --timeout without --wait
    ({"wait": "yes"}, "wait"),
    ({"cluster": 5}, "cluster"),
    ({"cluster": None}, "cluster"),
    ({"overrides": "nodes=2"}, "overrides"),  # a str is a sequence of one-letter lines
    ({"overrides": [1]}, "overrides"),
    ({"overrides": {1: 2}}, "overrides"),
    ({"overrides": {"env": {"A": object()}}}, "overrides"),
    ({"overrides": 3}, "overrides"),
    ({"idempotency_key": 7}, "idempotency_key"),
    ({"idempotency_key": ""}, "idempotency_key"),
    ({"accelerate_config": 3}, "accelerate_config"),
    ({"accelerate_config": ""}, "accelerate_config"),
    ({"init_from": ""}, "init_from"),  # was ignored: a cold start that looked warm
    ({"init_from": "  "}, "init_from"),
    ({"init_from": 3}, "init_from"),
    ({"init_optimizer": "no"}, "init_optimizer"),
    ({"init_optimizer": True}, "init_optimizer"),  # without init_from, as the CLI
]


@pytest.mark.parametrize(("kwargs", "field"), SUBMITS,
                         ids=[f"{f}-{i}" for i, (_, f) in enumerate(SUBMITS)])
def test_a_bad_submit_argument_is_an_input_error_and_submits_nothing(home, kwargs, field):
    with pytest.raises(InputError) as raised:
        fsdp_orch.submit("job.yaml", **kwargs)
    assert raised.value.field == field and raised.value.exit_code == 2, raised.value
    assert "\n" not in str(raised.value)
    assert not home.exists(), "a refused submit wrote into the home"


@pytest.mark.parametrize("job", [123, None, "", b"job.yaml"])
def test_a_bad_job_file_argument(home, job):
    with pytest.raises(InputError) as raised:
        fsdp_orch.submit(job)
    assert raised.value.field == "job"
    assert not home.exists()


@pytest.mark.parametrize("job_id", ["", "   ", None, 12, "abc\n"])
def test_a_job_handle_needs_a_job_id(home, job_id):
    """``Job("")`` matched any job by prefix: its cancel() cancelled some job."""
    with pytest.raises(InputError) as raised:
        fsdp_orch.Job(job_id)
    assert raised.value.field == "job_id"
    assert not home.exists()


@pytest.mark.parametrize(("call", "field"), [
    (lambda job: job.wait(timeout="1h"), "timeout"),
    (lambda job: job.wait(timeout=-5), "timeout"),
    (lambda job: job.wait(interval=0), "interval"),
    (lambda job: job.wait(interval="1"), "interval"),
    (lambda job: job.logs(rank="0"), "rank"),
    (lambda job: job.logs(attempt=True), "attempt"),
    (lambda job: job.logs(attempt=1.5), "attempt"),
])
def test_a_bad_argument_of_a_job_method(home, call, field):
    with pytest.raises(InputError) as raised:
        call(fsdp_orch.Job("0123456789ab"))
    assert raised.value.field == field
    assert not home.exists()


def test_good_arguments_pass_the_checks(home):
    """A Path, a mapping and a sequence are taken; the error that comes is the spec's own."""
    (home.parent / "work" / "bad.yaml").write_text(JOB + "nodes: zero\n")
    for overrides in ({"restart.max_restarts": 5}, ["restart.max_restarts=5"], (), None):
        with pytest.raises(InputError) as raised:
            fsdp_orch.submit(Path("bad.yaml"), cluster="local", overrides=overrides, wait=True,
                             timeout=1.5, idempotency_key="k")
        assert raised.value.field == "nodes" and raised.value.file == "bad.yaml", raised.value
