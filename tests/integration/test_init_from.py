"""``submit --init-from``: a new job begins at step 0 from another job's latest complete checkpoint,
checked on the parameters themselves; the optimizer state comes only when asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from fsdp_orch.checkpoints.layouts.dcp import step_dir_name as step
from tests.cli_harness import SMALL_DEMO, copy_demo, make_cli

pytestmark = pytest.mark.slow

SHORT = ["checkpoint.interval=5", "checkpoint.keep_last=5"]


def args(steps: int, lr: float | None = None) -> str:
    """The demo at test size (SMALL_DEMO: a step a quarter of the default model's); ``lr`` after
    it, so that it wins over SMALL_DEMO's."""
    extra = ["--lr", str(lr)] if lr is not None else []
    return "args=" + json.dumps(["--steps", str(steps), *SMALL_DEMO, *extra])


def sets(*lines: str) -> list[str]:
    return [part for line in lines for part in ("--set", line)]


def load(step_dir: Path, tmp: Path) -> dict:
    out = tmp / f"{step_dir.parent.name}-{step_dir.name}.pt"
    dcp_to_torch_save(str(step_dir), str(out))
    return torch.load(out, weights_only=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Job A: 20 steps of the demo, checkpoints every 5."""
    base = tmp_path_factory.mktemp("init_from")
    cli, job = make_cli(base), copy_demo(base)
    proc = cli.run("submit", "--cluster", "local", str(job), "--wait", "--json",
                   *sets(args(20), *SHORT))
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    assert status["state"] == "SUCCEEDED" and status["last_checkpoint_step"] == 20
    return cli, job, status


def optimizer_steps(state: dict) -> set[int]:
    return {int(s["step"]) for s in state["optim"]["state"].values()}


def result(status: dict) -> dict:
    return json.loads((Path(status["run_dir"]) / "result.json").read_text())


def test_a_warm_start_begins_at_step_0_with_the_previous_jobs_weights(trained, tmp_path):
    cli, job, first = trained
    ckpt_root = job.parent / "checkpoints" / "demo"
    # lr 0: the warm-started job's weights stay what it started from, so its final weights are them
    proc = cli.run("submit", "--cluster", "local", str(job), "--wait", "--json", "--init-from",
                   first["id"], *sets(args(10, lr=0.0), *SHORT))
    assert proc.returncode == 0, proc.stderr
    warm = json.loads(proc.stdout)
    assert warm["state"] == "SUCCEEDED", warm
    assert warm["origin"]["init_job"] == first["id"]
    assert (warm["origin"]["init_from"] == str(ckpt_root / step(20))
            and warm["origin"]["init_step"] == 20)
    own = ckpt_root / warm["id"]  # its own checkpoints: it never resumes job A's
    assert sorted(p.name for p in own.glob("step-*")) == [step(5), step(10)]
    assert warm["last_checkpoint_step"] == 10 and result(warm)["final_step"] == 10
    logs = cli.run("logs", warm["id"], check=True).stdout
    assert f"initialised from {ckpt_root / step(20)} (weights); starting at step 0" in logs
    assert "step=1 " in logs and "step=21" not in logs

    a = load(ckpt_root / step(20), tmp_path)
    b = load(own / step(10), tmp_path)
    assert a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k])
               for k in a["model"]), "weights differ from job A's"
    assert result(warm)["param_sha256"] == result(first)["param_sha256"]
    # weights only: the optimizer started fresh (Adam counted 10 steps fewer than job A's 20)
    assert optimizer_steps(b) == {optimizer_steps(a).pop() - 10}

    # A control without --init-from trains from the seed's random weights: the equality above is not
    # a given.
    proc = cli.run("submit", "--cluster", "local", str(job), "--wait", "--json",
                   "--idempotency-key", "control",
                   *sets(args(10, lr=0.0), "checkpoint.dir=checkpoints/control", *SHORT))
    assert proc.returncode == 0, proc.stderr
    assert result(json.loads(proc.stdout))["param_sha256"] != result(first)["param_sha256"]


def test_init_optimizer_takes_the_optimizer_state_too(trained, tmp_path):
    cli, job, first = trained
    ckpt_root = job.parent / "checkpoints" / "demo"
    proc = cli.run("submit", "--cluster", "local", str(job), "--wait", "--json", "--init-from",
                   str(ckpt_root), "--init-optimizer", *sets(args(5), *SHORT))
    assert proc.returncode == 0, proc.stderr
    warm = json.loads(proc.stdout)
    assert warm["state"] == "SUCCEEDED" and warm["origin"]["init_from"] == str(ckpt_root / step(20))
    a = load(ckpt_root / step(20), tmp_path)
    b = load(ckpt_root / warm["id"] / step(5), tmp_path)
    assert optimizer_steps(b) == {optimizer_steps(a).pop() + 5}  # Adam's count went on from job A's
    assert "(weights and optimizer state)" in cli.run("logs", warm["id"], check=True).stdout


@pytest.mark.parametrize(("value", "words"), [
    ("0123456789ab", ["no job and no path named '0123456789ab'"]),
    ("/nonexistent/ckpt", ["no job and no path"]),
])
def test_a_bad_init_from_is_one_line_exit_2_and_writes_nothing(cli, demo, value, words):
    proc = cli.run("submit", "--cluster", "local", str(demo), "--init-from", value)
    assert proc.returncode == 2 and "--init-from" in proc.stderr and "Traceback" not in proc.stderr
    assert all(w in proc.stderr for w in words), proc.stderr
    assert json.loads(cli.run("status", "--json", check=True).stdout) == []


def test_init_from_a_folder_without_a_complete_checkpoint(cli, demo, tmp_path):
    (tmp_path / "empty" / "step-5").mkdir(parents=True)  # no commit record
    proc = cli.run("submit", "--cluster", "local", str(demo), "--init-from",
                   str(tmp_path / "empty"))
    assert proc.returncode == 2 and "no complete checkpoint" in proc.stderr, proc.stderr
    proc = cli.run("submit", "--cluster", "local", str(demo), "--init-optimizer")
    assert proc.returncode == 2 and "--init-optimizer" in proc.stderr
