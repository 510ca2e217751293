"""The runtime's own checkpoints over a long run (issue 60), under the supervisor, real torchrun and
2 CPU ranks: an async save cut short by a crash inside its background writer is never taken for
complete, and ``checkpoint.interval: auto`` chooses Young's interval from the save cost it measured
and the time between failures (assumed in attempt 0, observed by the supervisor after a failure),
told in rank 0's log, the job's events and ``status``."""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import pytest
from cli_harness import SMALL_DEMO, demo_args, job_events, notices, why

from fsdp_orch.checkpoints.folders import list_checkpoints
from fsdp_orch.vocab.save_interval import AUTO_FIRST_SAVE_STEPS, AUTO_MAX_SECONDS, OBSERVED_MTBF_ENV

pytestmark = pytest.mark.slow

RESTART_FAST = ["--set", "restart.backoff.initial=0.5s", "--set", "restart.backoff.jitter=0",
                "--set", "watch.heartbeat_timeout=8s", "--set", "watch.startup_timeout=90s"]


def submit(cli, demo, *settings: str) -> tuple[dict, Path]:  # type: ignore[no-untyped-def]
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(demo), *RESTART_FAST,
                   *settings, timeout=300)
    status = json.loads(proc.stdout) if proc.stdout.strip() else {}
    assert proc.returncode == 0 and status.get("state") == "SUCCEEDED", (
        why(status) if status else proc.stderr)
    return status, cli.home / "runs" / status["id"]


def resumed_steps(cli, job_id: str) -> dict[int, int | None]:  # type: ignore[no-untyped-def]
    """Each attempt's resume step, as the supervisor recorded it when it started the attempt."""
    return {e["attempt"]: e.get("resume_step") for e in job_events(cli, job_id)
            if e.get("kind") == "attempt_started"}


def wider_demo(steps: int) -> str:
    """The test-size demo, but 384 wide: 20 MiB of state a rank with AdamW, above ASYNC_MIN_BYTES,
    so that ``async_save: auto`` (the default) saves in the background; on a small batch of short
    sequences, so that its steps stay fast."""
    args = [*SMALL_DEMO]
    for name, value in (("--dim", "384"), ("--batch-size", "4"), ("--seq-len", "8")):
        args[args.index(name) + 1] = value
    return "args=" + json.dumps(["--steps", str(steps), *args])


def test_an_async_save_cut_short_by_a_crash_in_its_writer_is_never_taken_for_complete(cli, demo):
    """With the default ``async_save: auto``, rank 1 dies inside the background writer of the save
    of step 15, its shards written and the save not committed, while training goes on: the next
    attempt resumes from step 10, the last committed save, and ends at the last step."""
    status, run_dir = submit(cli, demo, "--set", wider_demo(20),
                             "--set", "checkpoint.interval=5", "--set", "checkpoint.keep_last=10",
                             "--set", "env.FSDP_ORCH_FAULT=checkpoint_crash:step=12:rank=1")
    [failure] = status["failures"]
    assert failure["category"] == "injected_fault", failure
    assert "injected crash inside the checkpoint save of step 15" in failure["evidence"], failure
    assert resumed_steps(cli, status["id"]) == {0: None, 1: 10}
    # the supervisor's tracker never took the save in flight for a checkpoint: the latest it
    # recorded before the restart is 10 (it records the latest at each poll, so under load a poll
    # may see 5 and 10 at once and record 10 alone)
    events = job_events(cli, status["id"])
    restart = next(i for i, e in enumerate(events)
                   if e.get("kind") == "attempt_started" and e["attempt"] == 1)
    committed = [e["step"] for e in events[:restart] if e.get("kind") == "checkpoint_committed"]
    assert committed in ([5, 10], [10]), committed
    result = json.loads((run_dir / "result.json").read_text())
    assert result["resumed_from"] == 10 and result["final_step"] == 20
    ckpt = Path(status["last_checkpoint"]["path"]).parent
    found = {c.step: c for c in list_checkpoints(ckpt)}
    assert sorted(found) == [5, 10, 15, 20] and all(c.complete for c in found.values())
    for step in (5, 10, 15, 20):  # every save was async (auto); 15 is attempt 1's
        commit = json.loads((found[step].path / "COMMITTED").read_text())
        assert commit["async"] is True and commit["attempt"] == (0 if step <= 10 else 1), commit


STEPS = 60
CHOICE = re.compile(
    r"checkpoint every (\d+) step\(s\) \(interval: auto\): sqrt\(2 x save (\S+)s x time between "
    r"failures (\S+)s \((observed|assumed: checkpoint\.auto_mtbf)\)\) = (\S+)s = (\d+) step\(s\) "
    r"of (\S+)s")


def young_steps(cost: float, mtbf: float, step_s: float) -> int:
    """What the interval must be: sqrt(2 C M) in steps, within [1, an hour of steps]."""
    ideal = max(1, round(math.sqrt(2 * cost * mtbf) / step_s))
    return min(ideal, max(1, int(AUTO_MAX_SECONDS // step_s)))


def test_interval_auto_follows_the_measured_save_cost_and_the_observed_failures(cli, demo):
    """Attempt 0 saves at step 10, measures, and chooses with the assumed hour between failures
    (hundreds of steps); rank 1 crashes at step 20; attempt 1, told the time between failures the
    supervisor observed (about a minute at most), chooses a far shorter interval and saves by it."""
    status, run_dir = submit(cli, demo, "--set", demo_args(STEPS, "--sleep-per-step", "0.05"),
                             "--set", "checkpoint.interval=auto",
                             "--set", "checkpoint.auto_mtbf=1h", "--set", "checkpoint.keep_last=10",
                             "--set", "env.FSDP_ORCH_FAULT=crash:step=20:rank=1")
    assert [f["category"] for f in status["failures"]] == ["injected_fault"]
    assert resumed_steps(cli, status["id"]) == {0: None, 1: AUTO_FIRST_SAVE_STEPS}
    told = notices(cli, status["id"], "checkpoint_interval")
    assert [n["attempt"] for n in told][:2] == [0, 1], told
    chosen = {}
    for notice in told:
        match = CHOICE.fullmatch(notice["message"])
        assert match, notice["message"]
        steps, cost, mtbf, source, _, _, step_s = match.groups()
        assert int(steps) == pytest.approx(young_steps(float(cost), float(mtbf), float(step_s)),
                                           abs=1, rel=0.01), notice["message"]  # 3 digits shown
        chosen.setdefault(notice["attempt"], (int(steps), float(mtbf), source))
    assumed, observed = chosen[0], chosen[1]
    assert assumed[1:] == (3600.0, "assumed: checkpoint.auto_mtbf")
    # The supervisor's figure: the time from attempt 0's start to attempt 1's, over one failure.
    starts = {e["attempt"]: e["at"] for e in job_events(cli, status["id"])
              if e.get("kind") == "attempt_started"}
    assert observed[2] == "observed"
    assert observed[1] == pytest.approx(starts[1] - starts[0], abs=1.0)
    passed = re.findall(rf"{OBSERVED_MTBF_ENV}=([\d.]+)",
                        (run_dir / "attempt-1" / "launch.sh").read_text())
    assert len(passed) == 1 and float(passed[0]) == pytest.approx(observed[1], rel=1e-3), passed
    assert OBSERVED_MTBF_ENV not in (run_dir / "attempt-0" / "launch.sh").read_text()
    assert observed[0] < assumed[0] / 3, chosen  # far fewer steps between saves
    # Attempt 1 saved at step 10 + AUTO_FIRST_SAVE_STEPS, then ``observed`` steps later (a later
    # choice, if any, is told by a later notice), and at the end.
    ckpt = Path(status["last_checkpoint"]["path"]).parent
    saved = sorted(c.step for c in list_checkpoints(ckpt) if c.complete)
    first = 2 * AUTO_FIRST_SAVE_STEPS
    assert saved[:2] == [AUTO_FIRST_SAVE_STEPS, first] and saved[-1] == STEPS, saved
    assert saved[2] == min(first + observed[0], STEPS), (saved, chosen)
    # status shows the notices, and rank 0's log said each
    shown = [e["message"] for e in cli.status(status["id"])["events"]
             if e["kind"] == "checkpoint_interval"]
    assert shown == [n["message"] for n in told]
    # the ended attempt's logs are archived (.gz) once the supervisor restarts
    logged = "".join([*(p.read_text() for p in run_dir.rglob("stderr.log")),
                      *(gzip.decompress(p.read_bytes()).decode(errors="replace")
                        for p in run_dir.rglob("stderr.log.gz"))])
    assert all(f"[fsdp-orch] {n['message']}" in logged for n in told), logged[-3000:]
