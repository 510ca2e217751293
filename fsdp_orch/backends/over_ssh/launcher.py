"""The SSH kind's attempts: every host's node script started at once (``ssh_attempt``), on hosts
that share the run folder or, with ``shared_filesystem: false``, after the job was put on each
host's own disk (``ssh_staging``); either way watched through the reports the hosts send back
(``ssh_reports``): the heartbeats only, from hosts that share the run folder; the logs and exit
statuses too otherwise."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from functools import cached_property
from typing import Any

from fsdp_orch.backends.over_ssh.attempt import (
    SshAttempt,
    fsdp_orch_python,
    logs_at_end_command,
    start_command,
    stop_job_everywhere,
)
from fsdp_orch.backends.over_ssh.connect import on_every_host, run_on, run_with_input
from fsdp_orch.backends.over_ssh.reports import OwnDiskAttempt, SharedFsAttempt
from fsdp_orch.backends.over_ssh.sftp_storage import SftpStorage
from fsdp_orch.backends.over_ssh.staging import plan_hosts, put_on_own_disks
from fsdp_orch.checkpoints.storage import LOCAL, Storage
from fsdp_orch.launch.plan import LaunchPlan
from fsdp_orch.launch.plan_inputs import host_port
from fsdp_orch.launch.render import Artifact, write_artifacts
from fsdp_orch.launch.submission import Submission


def handed_values(plan: LaunchPlan) -> bytes:
    """The shell lines that export the values that came by reference, from this (the supervisor's)
    environment, where ``submit`` put them; b"" when the job has none."""
    lines = [f"export {name}={shlex.quote(os.environ[name])}\n"
             for name, _ in plan.secret_env if name in os.environ]
    return "".join(lines).encode()


class SshLauncher:
    def __init__(self, submission: Submission):
        self.submission = submission

    @property
    def ssh(self) -> Any:
        """The SSH settings and hosts (an ssh profile): the submission's own here; a TPU VM's
        launcher makes them from the workers it finds."""
        return self.submission.profile

    @cached_property
    def checkpoints(self) -> Storage:
        """The hosts' shared filesystem, or the first host's own disk over SFTP."""
        if self.ssh.shared_filesystem:
            return LOCAL
        return SftpStorage(self.ssh.hosts[0], self.ssh)

    def _attempt(self, attempt: int, pgids: dict[int, int], hosts: list[Any]) -> SshAttempt:
        if self.ssh.shared_filesystem:
            return SharedFsAttempt(self.submission, attempt, pgids, hosts=hosts, ssh=self.ssh)
        return OwnDiskAttempt(self.submission, attempt, pgids, self.checkpoints, hosts=hosts,
                              ssh=self.ssh)

    def port_for_attempt(self, attempt: int) -> int | None:
        return None  # the profile's rdzv_port, else one derived from the job and attempt (plan.py)

    def machines(self, attempt: int, say: Callable[[str], None]) -> tuple[str, ...]:
        return ()  # the profile lists the hosts

    def leaves_out_nodes(self) -> bool:
        """The profile lists more hosts than the job's nodes: the next one listed takes the place
        of a host left out."""
        return len(self.ssh.hosts) > self.submission.job.nodes

    def requeue_without(self, left_out: tuple[str, ...]) -> None:
        return None  # no scheduler: the profile's hosts are all there is

    def job_ending(self) -> None:
        """Every process of the job left on any host: the keepers the last attempt prepared for
        a next one (warm standby), which would otherwise wait UNCLAIMED_S. A host that does not
        answer has nothing we could stop."""
        if not self.submission.base_plan.standby:
            return
        job_id, ssh = self.submission.job_id, self.ssh
        stop_job_everywhere(ssh, job_id, timeout=ssh.connect_timeout + 30,
                            python=fsdp_orch_python(ssh, job_id,
                                                    self.submission.base_plan.bootstrap_dir))

    def adopt(self, attempt: int, ref: str | None) -> SshAttempt:
        """The attempt of ``SshAttempt.ref`` (``ssh:RANK=PGID@ADDRESS:PORT,...``; without ``@``,
        node rank N is the profile's host N)."""
        by_place = {host_port(host.address, host.port): host for host in self.ssh.hosts}
        pgids, hosts = {}, list(self.ssh.hosts)
        for item in (ref or "").removeprefix("ssh:").split(","):
            if "=" in item:
                rank, _, rest = item.partition("=")
                pgid, _, place = rest.partition("@")
                pgids[int(rank)] = int(pgid)
                if place in by_place:
                    hosts[int(rank)] = by_place[place]
        return self._attempt(attempt, pgids, hosts)

    def launch(self, plan: LaunchPlan, artifacts: list[Artifact]) -> SshAttempt:
        ssh = self.ssh
        if ssh.shared_filesystem:
            write_artifacts(artifacts)
        else:
            put_on_own_disks(plan, artifacts, self.submission, ssh)
        hosts = plan_hosts(plan, ssh)

        started: dict[int, int] = {}
        secrets = handed_values(plan)
        python = fsdp_orch_python(ssh, plan.job_id, plan.bootstrap_dir)

        def start_on(rank: int, host: Any) -> Exception | None:
            # hosts that share the run folder keep their logs (templates/ssh-node.sh.j2)
            at_end = (logs_at_end_command(python, plan.attempt_dir, plan.job_id, plan.attempt, rank)
                      if ssh.shared_filesystem else None)
            try:
                command = start_command(plan.attempt_dir, rank, at_end)
                timeout = ssh.connect_timeout + 30
                if secrets:
                    # over the SSH channel only: never a file, never an argument others could see
                    out = run_with_input(host, ssh, f'eval "$(cat)"; {command}', secrets, timeout)
                else:
                    out = run_on(host, ssh, command, timeout=timeout, warn=False).stdout
                started[rank] = int(out.strip().splitlines()[-1])
                return None
            except Exception as exc:  # noqa: BLE001 - reported below, after the others are stopped
                return exc

        errors = [e for e in on_every_host(hosts, start_on) if e is not None]
        attempt = self._attempt(plan.attempt, started, hosts)
        if errors:  # a host that did not start: the ones that did must not run alone
            attempt.stop(grace=2.0)
            raise errors[0]
        return attempt
