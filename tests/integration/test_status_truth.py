"""``status`` tells the truth about a healthy job's progress: polled every 0.5 s beside rank 0's own
heartbeat file during a demo run that steps every ~0.1 s, it never calls the job stalled, and the
STEP it shows trails the rank by about a second at most. Real torchrun, 2 CPU ranks.

The strict figure (1 s plus one step) is measured by bench/status_truth.py, idle and beside
``stress-ng --cpu 2``; here the bound is 3 s, which holds at twice this machine's load."""

from __future__ import annotations

import pytest
from cli_harness import demo_args, why
from status_sampling import RankSteps, beat_glob, cli_status, lags, sample_status

pytestmark = pytest.mark.slow

LAG_BOUND_S = 3.0


def test_a_stepping_job_is_never_stalled_and_its_step_is_fresh(cli, demo):
    job_id = cli.run("submit", "--cluster", "local", str(demo),
                     "--set", demo_args(150, "--sleep-per-step", "0.1"),
                     check=True).stdout.strip()
    rank = RankSteps(beat_glob(job_id)).start()
    try:
        samples = sample_status(cli_status(cli.env, job_id),
                                lambda s: s["state"] not in ("PENDING", "RUNNING"))
    finally:
        rank.stop()
    final = cli.status(job_id)
    assert final["state"] == "SUCCEEDED", why(final)
    running = [s for s in samples if s.state == "RUNNING" and s.step is not None]
    assert len(running) >= 10, samples  # the run was watched while it stepped
    assert len(rank.seen) >= 20, rank.seen
    assert [s for s in samples if s.stalled_for_s is not None] == []
    worst = max(lags(samples, rank))
    assert worst <= LAG_BOUND_S, (worst, rank.step_time(), samples)
