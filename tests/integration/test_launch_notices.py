"""What the launch changed, said where the user looks: a job under ``launcher: accelerate`` with the
Accelerate FSDP guide's config (``distributed_type: FSDP``) runs as MULTI_CPU on this CPU machine,
and ``render``, ``submit`` and the job's events each say so in one line. The same real job (a tiny
script, 2 ranks over gloo) shows that the supervisor is recorded once and that ``logs --rank`` finds
each rank's own lines under accelerate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import why

from fsdp_orch.launch.plan import LAUNCH_CHANGED
from fsdp_orch.launch.start_choices import ACCELERATE_FSDP_ON_CPU
from fsdp_orch.places.builtin import local_has_gpu

pytestmark = pytest.mark.slow

FSDP_CONFIG = Path(__file__).resolve().parents[1] / "fixtures" / "accelerate" / "fsdp_bert.yaml"
SCRIPT = """\
import torch.distributed as dist
dist.init_process_group("gloo")
print(f"hello from rank {dist.get_rank()}", flush=True)
dist.barrier()
dist.destroy_process_group()
"""
JOB = """\
name: notices
script: hello.py
launcher: accelerate
nodes: 1                # the guide's config is for two 8-GPU machines: job.yaml wins
procs_per_node: 2
env: {OMP_NUM_THREADS: "1"}
"""


@pytest.mark.skipif(local_has_gpu(),
                    reason="Accelerate runs the FSDP config as FSDP on a GPU: nothing changes")
def test_accelerate_fsdp_on_cpu_is_said_by_render_submit_and_the_events(cli, tmp_path):
    (tmp_path / "hello.py").write_text(SCRIPT)
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    options = ["--cluster", "local", "--accelerate-config", str(FSDP_CONFIG), str(job)]

    rendered = cli.run("render", *options, check=True)
    assert f"fsdp-orch: {ACCELERATE_FSDP_ON_CPU}\n" in rendered.stderr, rendered.stderr
    config = rendered.stdout.split("accelerate_config.yaml <==\n", 1)[1]
    assert f"# {ACCELERATE_FSDP_ON_CPU}\ndistributed_type: MULTI_CPU\n" in config, config

    submitted = cli.run("submit", "--wait", "--json", *options)
    assert submitted.stderr.count(ACCELERATE_FSDP_ON_CPU) == 1, submitted.stderr
    status = json.loads(submitted.stdout)
    assert status["state"] == "SUCCEEDED", why(status)
    job_id = status["id"]

    events = cli.run("events", job_id, check=True).stdout.splitlines()
    [notice] = [line for line in events if f"notice={LAUNCH_CHANGED}" in line]
    assert notice.endswith(f"message={ACCELERATE_FSDP_ON_CPU}"), notice
    assert len([line for line in events if " supervisor_started " in line]) == 1, events

    for rank in (0, 1):
        lines = cli.run("logs", job_id, "--rank", str(rank), check=True).stdout.splitlines()
        assert f"hello from rank {rank}" in lines, lines
        assert f"hello from rank {1 - rank}" not in lines, lines
