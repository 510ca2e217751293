"""The job spec's ``checkpoint.interval: auto``, ``async_save: auto`` and ``auto_mtbf``; the
observed time between failures on its way from the supervisor's plan to the runtime's settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from planning import SUPERVISOR, plan_on

from fsdp_orch.backends.registry import parse_profile
from fsdp_orch.jobspec.loading import load_job_text
from fsdp_orch.launch.plan_inputs import PlanContext
from fsdp_orch.runtime.settings import from_env
from fsdp_orch.vocab.errors import InputError
from fsdp_orch.vocab.save_interval import OBSERVED_MTBF_ENV

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BASE = "name: demo\nscript: train.py\n"


def checkpoint(extra: str):  # type: ignore[no-untyped-def]
    return load_job_text(BASE + f"checkpoint: {{{extra}}}\n").checkpoint


def error(extra: str) -> InputError:
    with pytest.raises(InputError) as info:
        load_job_text(BASE + f"checkpoint: {{{extra}}}\n")
    return info.value


def test_defaults_save_every_100_steps_async_where_it_pays_with_a_4h_prior() -> None:
    policy = load_job_text(BASE).checkpoint
    assert (policy.interval, policy.async_save, policy.auto_mtbf) == (100, "auto", 14400.0)


@pytest.mark.parametrize(("written", "value"), [
    ("auto", "auto"), ("AUTO", "auto"), ("'auto'", "auto"), ("25", 25), ("1", 1), ("'40'", 40),
])
def test_interval_is_steps_or_auto(written: str, value: object) -> None:
    assert checkpoint(f"interval: {written}").interval == value


@pytest.mark.parametrize(("written", "shown"), [
    ("0", "0"), ("-5", "-5"), ("true", "true"), ("automatic", "'automatic'"), ("2.5", "2.5"),
    ("null", "None"), ("[10]", "[10]"),
])
def test_any_other_interval_is_a_one_line_error_naming_the_field(written: str, shown: str) -> None:
    err = error(f"interval: {written}")
    assert err.field == "checkpoint.interval"
    assert f"expected a number of steps above 0 or 'auto', got {shown}" in err.detail
    assert "\n" not in str(err)


@pytest.mark.parametrize(("written", "value"), [
    ("auto", "auto"), ("true", True), ("false", False), ("on", True), ("off", False),
    ("'false'", False),
])
def test_async_save_is_auto_true_or_false(written: str, value: object) -> None:
    assert checkpoint(f"async_save: {written}").async_save == value


@pytest.mark.parametrize("written", ["1", "'sometimes'", "null"])
def test_any_other_async_save_is_an_error(written: str) -> None:
    err = error(f"async_save: {written}")
    assert err.field == "checkpoint.async_save" and "expected auto, true or false" in err.detail
    assert "\n" not in str(err)


def test_auto_mtbf_is_a_duration_above_zero() -> None:
    assert checkpoint("auto_mtbf: 90m").auto_mtbf == 5400.0
    assert error("auto_mtbf: 0").field == "checkpoint.auto_mtbf"
    assert "duration" in error("auto_mtbf: soon").detail


def test_the_runtime_reads_the_policy_back_from_job_json() -> None:
    """job.json holds the policy as the models dump it; the runtime's settings load it."""
    import json

    from fsdp_orch.jobspec.checkpoint_policy import CheckpointPolicy

    policy = checkpoint("interval: auto, async_save: false, auto_mtbf: 2h")
    dumped = json.loads(json.dumps(policy.model_dump(mode="json")))
    assert dumped["interval"] == "auto" and dumped["async_save"] is False
    assert CheckpointPolicy.model_validate(dumped) == policy


def plan_env(mtbf_s: float | None, attempt: int = 1) -> dict[str, str]:
    ctx = PlanContext(job_id="j1", attempt=attempt, run_root="/h", job_dir="/j",
                      supervisor_command=SUPERVISOR, mtbf_s=mtbf_s)
    job = load_job_text(BASE + "checkpoint: {interval: auto}\n")
    return dict(plan_on(job, parse_profile(FIXTURES / "clusters" / "local.yaml"), "local",
                        ctx).env)


def test_the_ranks_get_the_observed_mtbf_only_once_known() -> None:
    assert plan_env(1234.567)[OBSERVED_MTBF_ENV] == "1234.6"
    assert OBSERVED_MTBF_ENV not in plan_env(None)  # attempt 0, or no failure yet
    assert OBSERVED_MTBF_ENV not in plan_env(None, attempt=0)


def test_the_runtime_settings_read_it() -> None:
    assert from_env({OBSERVED_MTBF_ENV: "1234.6"}).observed_mtbf_s == 1234.6
    assert from_env({}).observed_mtbf_s is None
    assert from_env({OBSERVED_MTBF_ENV: ""}).observed_mtbf_s is None
    for bad in ("0", "-3", "soon", "inf", "nan"):
        with pytest.raises(ValueError, match=f"{OBSERVED_MTBF_ENV}: expected a number of seconds"):
            from_env({OBSERVED_MTBF_ENV: bad})
