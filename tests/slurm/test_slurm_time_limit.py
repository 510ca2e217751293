"""The SLURM time limit end to end: a job allowed 2 minutes that needs more than 2 minutes of
training at its first allocation's pace gets SLURM's USR2 before the limit, saves a checkpoint when
the supervisor asks, is requeued, resumes from that checkpoint and ends SUCCEEDED with the loss of
an uninterrupted run. Real test cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import copy_demo, demo_args, slow_in_attempt

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.root]

# The first allocation (attempt 0) trains at 1 s a step (an injected ``slow`` fault on both ranks,
# attempt 0 only): 120 s of it outlasts the 2-minute limit, so the job is still running at the
# latest warning (90 s in) whatever the ranks' start took. The requeued allocation (attempt 1)
# trains the rest at full speed: it ends in seconds, far inside its own limit (with
# ``--sleep-per-step`` it slept 30-60 s more there: 110 steps took 150 s alone, 244 s in CI).
STEPS, SLEEP = 120, 1.0
SLOW_FIRST_ALLOCATION = ";".join(slow_in_attempt(0, SLEEP))


def short_profile(cli) -> None:  # type: ignore[no-untyped-def]
    """``slurm-2min``: the login node's profile with a 2-minute limit, warned 60 s ahead (slurmctld
    checks time limits every 30 s: the warning comes 60 to 90 s in, when the ranks train; warned 30
    s ahead it came 90 to 120 s in, up to 30 s more of attempt 0 that tested nothing). The
    supervisor asks for the checkpoint within half the delay: 30 s."""
    text = (cli.cwd / "clusters" / "slurm.yaml").read_text()
    assert 'time: "01:00:00"' in text and "signal_delay: 120" in text
    text = text.replace('time: "01:00:00"',
                        'time: "2"').replace("signal_delay: 120", "signal_delay: 60")
    (cli.cwd / "clusters" / "slurm-2min.yaml").write_text(text)


def test_a_job_past_its_time_limit_checkpoints_on_the_warning_is_requeued_and_resumes(
        slurm_cluster, cli, tmp_path):
    short_profile(cli)
    demo = copy_demo(tmp_path)
    job_id = cli.run("submit", "--cluster", "slurm-2min", str(demo), "--set", "nodes=2",
                     "--set", "procs_per_node=1", "--set", "checkpoint.interval=1000",
                     "--set", demo_args(STEPS),
                     "--set", f"env.FSDP_ORCH_FAULT={SLOW_FIRST_ALLOCATION}",
                     "--set", "restart.backoff.initial=1s", "--set", "watch.heartbeat_timeout=30s",
                     check=True).stdout.strip()
    final = cli.wait_until(job_id, lambda s: s["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"),
                           timeout=900, what="the end")
    assert final["state"] == "SUCCEEDED", final
    requeues = [f for f in final["failures"] if f["action"] == "requeue"]
    assert (requeues and all(f["category"] == "preemption_or_node_lost"
                             for f in requeues)), (final["failures"])
    assert len(requeues) == len(final["failures"]), final["failures"]  # nothing else went wrong
    warned = [e for e in final["events"] if e["kind"] == "checkpoint_on_warning"]
    assert warned and "saved" in warned[0]["message"], final["events"]
    result = json.loads((Path(final["run_dir"]) / "result.json").read_text())
    assert result["resumed_from"] > 0  # from the checkpoint saved on the warning (interval: 1000)
    events = [json.loads(line)
              for line in cli.run("events", job_id, "--json", check=True).stdout.splitlines()]
    sid = next(e["backend_ref"].split(":")[1] for e in events if e["kind"] == "scheduled")
    runs = slurm_cluster.sacct(sid, "JobID", "State", duplicates=True)
    assert any(r["JobID"] == sid and r["State"] == "REQUEUED" for r in runs), runs
    assert not any(r["JobID"] == sid and r["State"] == "TIMEOUT" for r in runs), runs
