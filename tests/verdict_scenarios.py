"""The hang-verdict scenarios of issue 26, each one real job through the CLI: run once by
tests/integration/test_hang_verdicts.py and five times by bench/verdicts.py.

Each returns the job's final status and whether the verdict was the right one (``hit``), with the
reason when it was not."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from cli_harness import REPO, Cli, copy_demo, copy_unchanged, culprit_leads

# The verdict is what these scenarios judge: no restart after it (the restarts are tested
# elsewhere).
VERDICT_ONLY = ["--set", "restart.max_restarts=0"]
# The demo at a size that trains in a fraction of a second per step on 2 CPU cores.
SMALL_DEMO = ["--vocab", "64", "--dim", "32", "--layers", "2", "--heads", "2", "--seq-len", "16",
              "--batch-size", "16"]
SCRIPTS = REPO / "tests" / "fixtures" / "scripts"


def fixture_job(base: Path, script: str, job_yaml: str) -> Path:
    """A job folder under ``base`` with tests/fixtures/scripts/``script`` as its train.py and
    ``job_yaml`` as its job.yaml; the job file."""
    folder = base / Path(script).stem
    folder.mkdir()
    shutil.copy(SCRIPTS / script, folder / "train.py")
    job = folder / "job.yaml"
    job.write_text(job_yaml)
    return job


@dataclass
class Outcome:
    status: dict
    hit: bool
    why: str = ""  # what was wrong, when not a hit

    @property
    def failure(self) -> dict:
        return self.status["failures"][0] if self.status.get("failures") else {}


def submit(cli: Cli, job: Path, *extra: str, timeout: float = 300) -> dict:
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(job), *extra,
                   timeout=timeout)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def _first_hang(status: dict) -> dict | None:
    return next((f for f in status.get("failures", []) if f["category"] == "hang"), None)


def culprit_first(cli: Cli, base: Path, hung_rank: int, heartbeat_timeout: float = 5.0) -> Outcome:
    """The unchanged torchrun + FSDP2 script with ``hung_rank`` stuck in user code at step 30 while
    its peer waits in FSDP's next all-gather: the verdict's evidence must lead with the stuck
    rank."""
    job = copy_unchanged(base, "torchrun_fsdp2")
    status = submit(cli, job, *VERDICT_ONLY, "--set",
                    'args=["--steps", "50", "--save-every", "20"]',
                    "--set", f"watch.heartbeat_timeout={heartbeat_timeout:g}s",
                    "--set", "watch.startup_timeout=60s",
                    "--set", f"env.FSDP_ORCH_FAULT=hang:step=30:rank={hung_rank}")
    hang = _first_hang(status)
    if hang is None:
        return Outcome(status, False, f"no hang verdict: {status.get('failures')}")
    evidence = hang["evidence"] or ""
    if (not culprit_leads(evidence, hung_rank)
        or not evidence.startswith(f"rank {hung_rank} stuck in train.py:")):
        return Outcome(status, False, f"evidence does not lead with rank {hung_rank}: {evidence}")
    if "1 rank waiting in " not in evidence:
        return Outcome(status, False, f"the waiting rank is not named: {evidence}")
    return Outcome(status, True)


def hang_at_a_checkpoint_step(cli: Cli, base: Path, heartbeat_timeout: float = 5.0) -> Outcome:
    """The demo (fsdp_orch.runtime, DCP saves every 10 steps) with rank 1 hung at step 30, a
    checkpoint step: rank 0 waits inside the save. The verdict must come within heartbeat_timeout
    + 2 s, category hang, saying the ranks were in a checkpoint save."""
    demo = copy_demo(base)
    status = submit(cli, demo, *VERDICT_ONLY, "--set",
                    "args=" + json.dumps(["--steps", "40", *SMALL_DEMO]),
                    "--set", "checkpoint.interval=10",
                    "--set", f"watch.heartbeat_timeout={heartbeat_timeout:g}s",
                    "--set", "watch.startup_timeout=60s",
                    "--set", "env.FSDP_ORCH_FAULT=hang:step=30:rank=1")
    failure = status["failures"][0] if status.get("failures") else None
    if failure is None or failure["category"] != "hang":
        return Outcome(status, False, f"not a hang verdict: {failure}")
    if failure["stalled_for_s"] > heartbeat_timeout + 2:
        return Outcome(status, False, f"verdict after {failure['stalled_for_s']:.1f}s, "
                                      f"past {heartbeat_timeout:g}s + 2s")
    evidence = failure["evidence"] or ""
    if not culprit_leads(evidence, 1) or "checkpoint save" not in evidence:
        return Outcome(status, False, f"evidence: {evidence}")
    return Outcome(status, True)


def slow_save_keeps_writing(cli: Cli, base: Path, heartbeat_timeout: float = 4.0) -> Outcome:
    """Both ranks in a save that writes 40 MB at 4 MB/s (10 s, 2.5x the window) from a writer
    thread, main thread waiting in join(): never a verdict."""
    folder = base / "slow-save"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPTS / "slow_save_train.py", folder / "train.py")
    job = folder / "job.yaml"
    job.write_text("name: slow-save\nscript: train.py\nlauncher: torchrun\nprocs_per_node: 2\n"
                   "args: [--steps, '40', --save-at, '20', --save-mb, '40', --rate-mb-s, '4']\n"
                   "env: {OMP_NUM_THREADS: '1'}\nrestart: {max_restarts: 0}\n")
    status = submit(cli, job, "--set", f"watch.heartbeat_timeout={heartbeat_timeout:g}s",
                    "--set", "watch.startup_timeout=60s")
    if status["state"] != "SUCCEEDED" or status.get("failures"):
        return Outcome(status, False, f"{status['state']}: {status.get('failures')}")
    return Outcome(status, True)
