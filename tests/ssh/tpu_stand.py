"""A TPU VM on a stand-in for Google Cloud, shared by the TPU VM tests: a FAKE gcloud
(tests/fakes/fake_gcloud.py, first on PATH) whose workers are real SSH test hosts
(tests/ssh/hosts.sh), a CLI whose ``tpu`` profile owns a spot v4 slice of those workers, running a
given python, and a folder every worker sees for the checkpoints (as a gcsfuse bucket would be)."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cli_harness import Cli, copy_demo, make_cli
from fakes.fake_gcloud import calls, new_state

FAKE_GCLOUD_BIN = Path(__file__).resolve().parents[1] / "fakes" / "bin"
TPU = "fo-test-v4"
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")
# What every submit sets (nodes: the stand's worker count); a test's own --set that follows wins.
SUBMIT_DEFAULTS = ["--set", "launcher=xla", "--set", "checkpoint.interval=5", "--set",
                   "restart.backoff.initial=1s",
                   "--set", "restart.backoff.jitter=0", "--set", "watch.heartbeat_timeout=10s",
                   "--set", "watch.startup_timeout=120s"]
# The test hosts share one hostname: gloo must not find its address through it.
PROFILE_ENV = {"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1"}


@dataclass
class TpuCli(Cli):
    """The CLI with the fake gcloud first on PATH, for it and the supervisors it starts."""

    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**super().env, **self.extra_env}


@dataclass
class Stand:
    cli: TpuCli
    demo: Path
    state: Path  # the fake gcloud's
    bucket: Path  # what every worker mounts, for checkpoints
    remote_workdir: str
    num_workers: int = 2

    def submit(self, *extra: str, wait: bool = True, demo: Path | None = None) -> dict | str:
        job = str(demo or self.demo)
        ckpt = self.bucket / uuid.uuid4().hex[:8]
        args = ["submit", "--cluster", "tpu", *(["--wait", "--json"] if wait else []), job,
                *SUBMIT_DEFAULTS,
                "--set", f"nodes={self.num_workers}", "--set", f"checkpoint.dir={ckpt}", *extra]
        proc = self.cli.run(*args, timeout=500)
        assert (proc.returncode in (0, 1)
                and proc.stdout.strip()), ((proc.returncode, proc.stdout, proc.stderr))
        return json.loads(proc.stdout) if wait else proc.stdout.strip()

    def on_worker(self, ssh_hosts, i: int,  # type: ignore[no-untyped-def]
                  job_id: str, path: str) -> str:
        return ssh_hosts.ssh(i, "cat", f"{self.remote_workdir}/runs/{job_id}/{path}").stdout


def tpu_stand(ssh_hosts, python: str | Path, num_workers: int = 2,  # type: ignore[no-untyped-def]
              env: dict[str, str] | None = None) -> Iterator[Stand]:
    """Yield a Stand (for a fixture to yield from): a CLI and a copy of the demo in the folder the
    workers cannot see, a tpu-vm profile that owns a spot v4 slice of ``num_workers`` workers (hosts
    1, 2, ...; 4 chips each, so v4-8 per worker) running ``python``, with ``env`` over the profile's
    default env, and the fake gcloud's state (no TPU VM yet). Afterwards: no job process is left on
    any host."""
    base = ssh_hosts.submit_host_dir / uuid.uuid4().hex[:8]
    bucket = ssh_hosts.dir / "bucket" / base.name
    bucket.mkdir(parents=True)
    workers = [{"address": ssh_hosts.addresses[i], "host": i + 1,
                "namespace": ssh_hosts.namespaces[i]}
               for i in range(num_workers)]
    state = new_state(ssh_hosts.dir / f"gcloud-{base.name}.json", workers=workers,
                      ssh_dir=str(ssh_hosts.dir),
                      ssh={"user": "root", "key": str(ssh_hosts.key),
                           "known_hosts": str(ssh_hosts.known_hosts)})
    plain = make_cli(base)
    cli = TpuCli(home=plain.home, cwd=plain.cwd, extra_env={
        "PATH": f"{FAKE_GCLOUD_BIN}{os.pathsep}{os.environ['PATH']}",
        "FAKE_GCLOUD_STATE": str(state)})
    remote_workdir = f"{ssh_hosts.dir}/host-disk/tpu"
    (cli.cwd / "clusters").mkdir(parents=True, exist_ok=True)
    (cli.cwd / "clusters" / "tpu.yaml").write_text(f"""kind: tpu-vm
tpu_name: {TPU}
zone: us-central2-b
project: fake-project
accelerator_type: v4-{8 * num_workers}
runtime_version: tpu-ubuntu2204-base
spot: true
owns_vm: true
num_workers: {num_workers}
pjrt_device: CPU
python: '{python}'
remote_workdir: {remote_workdir}
prepare:
  - "test -d {remote_workdir} && echo prepared > {remote_workdir}/prepared"
ssh_user: root
ssh_key: {ssh_hosts.key}
connect_timeout: 5
ready_timeout: 120
env: {json.dumps({**PROFILE_ENV, **(env or {})})}
""")
    try:
        yield Stand(cli, copy_demo(base), state, bucket, remote_workdir, num_workers)
        ssh_hosts.assert_nothing_left(cli.home)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(bucket, ignore_errors=True)


def explained(status: dict) -> str:
    """What a failed assertion on ``status`` shows: the reason, the failures, the supervisor's
    log."""
    log = Path(status["run_dir"]) / "supervisor.log"
    return (f"{status['state']}: {status.get('reason')}\nfailures: {status.get('failures')}\n"
            f"{log.read_text()[-4000:] if log.exists() else ''}")


def verbs(state: Path) -> list[str]:
    return [call["verb"] for call in calls(state)]
