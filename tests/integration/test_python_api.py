"""The Python API (`import fsdp_orch`) driving real local jobs, as a pipeline task would: it returns
what the CLI prints as JSON, a failing job raises nothing, a wait that runs out raises WaitTimedOut,
bad input raises the CLI's InputError."""

from __future__ import annotations

import pytest
from cli_harness import SMALL_DEMO, UNTIL_STOPPED

import fsdp_orch
from fsdp_orch.vocab.errors import InputError

pytestmark = pytest.mark.slow


@pytest.fixture
def here(cli, monkeypatch):  # type: ignore[no-untyped-def]
    """This process as a pipeline task: FSDP_ORCH_HOME and the working directory of ``cli``."""
    monkeypatch.setenv("FSDP_ORCH_HOME", str(cli.home))
    monkeypatch.chdir(cli.cwd)
    return cli


def test_the_api_drives_a_real_job_to_succeeded_with_what_the_cli_prints(here, demo):
    job = fsdp_orch.submit(demo, cluster="local",
                           overrides={"args": ["--steps", "12", *SMALL_DEMO],
                                      "checkpoint.interval": 4},
                           wait=True, timeout=300)
    assert isinstance(job, fsdp_orch.Job) and job.created
    status = job.status()
    assert status["state"] == "SUCCEEDED" and status["progress"]["step"] == 12, status
    assert status == here.status(job.id)  # the CLI's `status ID --json`, read by another process
    kinds = [event["kind"] for event in job.events()]
    assert (kinds[0] == "submitted" and kinds[-1] == "finished"
            and "checkpoint_committed" in kinds), kinds
    assert "step" in job.logs() or job.logs(), "no log lines"
    assert job.logs() == here.run("logs", job.id, check=True).stdout


def test_a_failing_job_raises_nothing_and_reports_failed(here, tmp_path):
    spec = tmp_path / "fails.yaml"
    spec.write_text("name: fails\nlauncher: python\ncommand: [bash, -c, 'echo boom >&2; exit 3']\n")
    job = fsdp_orch.submit(spec, cluster="local", overrides=["restart.max_restarts=0"], wait=True)
    status = job.status()
    assert status["state"] == "FAILED" and status["failures"], status


def test_a_wait_that_runs_out_raises_wait_timed_out_and_the_job_goes_on(here, demo):
    job = fsdp_orch.submit(demo, cluster="local",
                           overrides={"args": ["--steps", *UNTIL_STOPPED, *SMALL_DEMO]})
    with pytest.raises(fsdp_orch.WaitTimedOut) as raised:
        job.wait(timeout=2)
    assert (raised.value.status["state"] in ("PENDING", "STARTING", "RUNNING")
            and raised.value.exit_code == 3)
    here.wait_until(job.id, lambda s: s["state"] == "RUNNING", timeout=120, what="RUNNING")
    assert "cancelled" in job.cancel()
    assert job.status()["state"] == "CANCELLED"


def test_bad_input_raises_the_typed_error_naming_the_field(here, demo):
    with pytest.raises(InputError) as raised:
        fsdp_orch.submit(demo, cluster="local", overrides={"restart.max_restarts": "lots"})
    assert (raised.value.field == "restart.max_restarts"
            and raised.value.exit_code == 2), (raised.value)
    assert not (here.home / "runs").exists() or not any((here.home / "runs").iterdir())
