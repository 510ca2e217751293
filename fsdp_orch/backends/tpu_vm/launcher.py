"""A TPU VM kind's attempts: the TPU VM made READY before each (``tpu_lifecycle``), then its workers
treated as SSH hosts with their own disks, at the addresses ``describe`` gave (``ssh_launcher``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fsdp_orch.backends.over_ssh.attempt import SshAttempt, stop_job_everywhere
from fsdp_orch.backends.over_ssh.hosts import SshProfile
from fsdp_orch.backends.over_ssh.launcher import SshLauncher
from fsdp_orch.backends.over_ssh.reports import OwnDiskAttempt
from fsdp_orch.backends.over_ssh.sftp_storage import SftpStorage
from fsdp_orch.backends.tpu_vm.gcloud import USABLE
from fsdp_orch.backends.tpu_vm.lifecycle import TpuVm
from fsdp_orch.checkpoints.storage import Storage
from fsdp_orch.launch.submission import Submission
from fsdp_orch.vocab.errors import FsdpOrchError


def known_hosts_file(profile: Any, run_dir: Path, vm_id: str | None) -> str:
    """The profile's known_hosts, or one file per TPU VM (by its id) in the job's run folder, which
    takes each worker's key on first use: a TPU VM created again has new keys, and an address that
    was a preempted VM's may be the new one's."""
    if profile.known_hosts:
        return str(profile.known_hosts)
    path = run_dir / f"known-hosts-tpu-{vm_id or 'unknown'}"
    path.touch(exist_ok=True)  # paramiko saves the keys it accepts only into a file that exists
    return str(path)


def workers_as_ssh_hosts(profile: Any, workers: tuple[str, ...], known_hosts: str) -> SshProfile:
    """The SSH settings and hosts that reach the workers (what the SSH machinery takes)."""
    import getpass

    user = profile.ssh_user or getpass.getuser()
    return SshProfile.model_validate({
        "kind": "ssh", "python": profile.python, "device": "cpu", "shared_filesystem": False,
        "remote_workdir": profile.remote_workdir, "connect_timeout": profile.connect_timeout,
        "known_hosts": known_hosts,
        "host_key_policy": "accept-new" if not profile.known_hosts else profile.host_key_policy,
        "hosts": [{"address": a, "port": profile.ssh_port, "user": user,
                   "identity_file": profile.ssh_key}
                  for a in workers]})


class TpuAttempt(OwnDiskAttempt):
    def __init__(self, submission: Submission, attempt: int, pgids: dict[int, int],
                 storage: Storage, vm: TpuVm, hosts: list[Any], ssh: SshProfile):
        super().__init__(submission, attempt, pgids, storage, hosts=hosts, ssh=ssh)
        self.vm = vm

    def lost_hosts(self) -> tuple[str, ...]:
        return ()  # the workers come back with their TPU VM: no attempt is planned around one

    def lost_node(self) -> str | None:
        """A TPU VM that is no longer READY (preempted, under maintenance) is the cause;
        else a worker that stopped answering."""
        try:
            vm = self.vm.describe()
        except FsdpOrchError:
            return super().lost_node()
        if vm.state not in USABLE:
            return f"{vm.summary()} (gcloud describe)"
        return super().lost_node()


class TpuVmLauncher(SshLauncher):
    def __init__(self, submission: Submission, vm: TpuVm | None = None):
        super().__init__(submission)
        self.vm = vm or TpuVm(submission.profile)
        self.workers: tuple[str, ...] = ()
        self.vm_id: str | None = None
        # the TPU VM (id) whose workers ran the profile's prepare
        self.prepared_vm: str | None = None
        self._storage: SftpStorage | None = None

    @property
    def ssh(self) -> SshProfile:
        if not self.workers:
            raise FsdpOrchError(f"no workers of TPU VM {self.vm.profile.tpu_name} are known yet")
        return workers_as_ssh_hosts(self.submission.profile, self.workers,
                                    known_hosts_file(self.submission.profile,
                                                     self.submission.run_dir, self.vm_id))

    @property
    def checkpoints(self) -> Storage:
        """Worker 0's disk (or the storage mounted there), over SFTP."""
        ssh = self.ssh
        if self._storage is None or self._storage.host.address != ssh.hosts[0].address:
            if self._storage is not None:
                self._storage.close()
            self._storage = SftpStorage(ssh.hosts[0], ssh)
        return self._storage

    def machines(self, attempt: int, say: Callable[[str], None]) -> tuple[str, ...]:
        profile: Any = self.submission.profile
        vm = self.vm.ready(say)
        self.workers, self.vm_id = vm.addresses(profile.address), vm.vm_id
        if vm.vm_id != self.prepared_vm:
            say(f"{vm.summary()} with workers {', '.join(self.workers)}: preparing them "
                "(gcloud compute tpus tpu-vm ssh --worker=all)")
            self.vm.prepare()
            self.prepared_vm = vm.vm_id
        return self.workers

    def _attempt(self, attempt: int, pgids: dict[int, int], hosts: list[Any]) -> SshAttempt:
        return TpuAttempt(self.submission, attempt, pgids, self.checkpoints, self.vm, hosts,
                          self.ssh)

    def adopt(self, attempt: int, ref: str | None) -> SshAttempt:
        """The attempt of ``ref`` (``ssh:RANK=PGID@ADDRESS:PORT,...``): its workers are in it."""
        places = sorted((int(rank), rest.partition("@")[2]) for rank, _, rest in
                        (item.partition("=") for item in (ref or "").removeprefix("ssh:").split(",")
                         if "=" in item))
        self.workers = tuple(place.rpartition(":")[0] for _, place in places)
        try:
            self.vm_id = self.vm.describe().vm_id
        except FsdpOrchError:
            self.vm_id = None
        return super().adopt(attempt, ref)


def stop_on_workers(submission: Submission, job_id: str) -> None:
    """Every process of the job on every worker the TPU VM has now; nothing when it has none."""
    profile: Any = submission.profile
    try:
        vm = TpuVm(profile).describe()
    except FsdpOrchError:
        return
    workers = vm.addresses(profile.address)
    if vm.state not in USABLE or not all(workers):
        return
    ssh = workers_as_ssh_hosts(profile, workers,
                               known_hosts_file(profile, submission.run_dir, vm.vm_id))
    stop_job_everywhere(ssh, job_id)
