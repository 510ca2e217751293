"""``status`` sampled as a user would poll it, next to a rank's own heartbeat file: how far the STEP
it shows trails the rank, and whether it ever calls the stepping job stalled. Shared by
tests/integration/test_status_truth.py and bench/status_truth.py."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sample:
    asked_at: float  # when the status process started (what it shows is no newer)
    step: int | None
    stalled_for_s: float | None
    state: str


@dataclass
class RankSteps:
    """A rank's heartbeat file, read every ``every`` s in a thread: when it first showed each
    step."""

    path_glob: str
    every: float = 0.05
    seen: list[tuple[float, int]] = field(default_factory=list)  # (time, step), steps rising
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> RankSteps:
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _read(self) -> None:
        while not self._stop.wait(self.every):
            for path in glob.glob(self.path_glob):
                try:
                    with open(path) as f:
                        beat = json.load(f)
                except (OSError, ValueError):
                    continue
                step = beat.get("step")
                if (beat.get("state") == "training" and isinstance(step, int)
                        and (not self.seen or step > self.seen[-1][1])):
                    self.seen.append((time.time(), step))

    def passed(self, step: int, before: float) -> float | None:
        """When the rank's heartbeat first showed a step past ``step``, if before ``before``."""
        return next((t for t, s in self.seen if s > step and t <= before), None)

    def step_time(self) -> float:
        """The median seconds per step over what was seen."""
        gaps = sorted((t2 - t1) / (s2 - s1) for (t1, s1), (t2, s2)
                      in zip(self.seen, self.seen[1:], strict=False) if s2 > s1)
        return gaps[len(gaps) // 2] if gaps else 0.0


def sample_status(status: Callable[[], dict], done: Callable[[dict], bool],
                  every: float = 0.5, timeout: float = 300.0) -> list[Sample]:
    """``status()`` every ``every`` s until ``done(status)``."""
    samples: list[Sample] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        asked = time.time()
        data = status()
        progress = data.get("progress") or {}
        samples.append(Sample(asked, progress.get("step"), data.get("stalled_for_s"),
                              data["state"]))
        if done(data):
            return samples
        time.sleep(max(0.0, every - (time.time() - asked)))
    raise AssertionError(f"status never said done within {timeout:g}s: {samples[-1:]}")


def lags(samples: list[Sample], rank: RankSteps) -> list[float]:
    """For each sample of the running job with a step: how long before it was asked the rank had
    already passed the step it showed (0 when it had not)."""
    out = []
    for sample in samples:
        if sample.state != "RUNNING" or sample.step is None:
            continue
        passed = rank.passed(sample.step, sample.asked_at)
        out.append(0.0 if passed is None else sample.asked_at - passed)
    return out


def cli_status(env: dict[str, str], job_id: str) -> Callable[[], dict]:
    def status() -> dict:
        proc = subprocess.run([sys.executable, "-m", "fsdp_orch", "status", job_id, "--json"],
                              env=env, capture_output=True, text=True, timeout=60, check=True)
        return json.loads(proc.stdout)
    return status


def beat_glob(job_id: str, rank: int = 0, attempt: int = 0) -> str:
    """Where a local job's rank writes its heartbeat (the node's folder of /tmp/fsdp-orch-<uid>)."""
    return os.path.join(f"/tmp/fsdp-orch-{os.getuid()}", job_id, f"attempt-{attempt}", "node-*",
                        f"rank-{rank}.json")


__all__ = ["RankSteps", "Sample", "beat_glob", "cli_status", "lags", "sample_status"]
