"""The SSH kind: a list of hosts reached over SSH (fabric), no scheduler. The supervisor runs
detached on the submitting machine, as on the local kind, and starts each attempt on every host at
once (``ssh_attempt``). Either the hosts share the run folder with it (``shared_filesystem: true``),
or each keeps the job under its own ``remote_workdir`` (``false``): the job is copied there and the
hosts report back over SSH (``ssh_staging``, ``ssh_reports``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdp_orch.backends.over_ssh.hosts import SshProfile
from fsdp_orch.backends.supervised_here import SupervisedHere
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.launch.plan import LaunchPlan
from fsdp_orch.launch.plan_inputs import NodeTarget, Placement, PlanContext, host_port
from fsdp_orch.launch.render import Artifact, Templates
from fsdp_orch.launch.submission import Submission
from fsdp_orch.observe.command import Runner
from fsdp_orch.record.status import JobStatus
from fsdp_orch.vocab.checks import Check
from fsdp_orch.vocab.errors import InputError


class SshKind(SupervisedHere[SshProfile]):
    name = "ssh"
    profile_model = SshProfile
    main_template = "ssh-node.sh.j2"

    def place(self, job: JobSpec, profile: SshProfile, cluster: str, ctx: PlanContext) -> Placement:
        if job.min_nodes > len(profile.hosts):
            raise InputError(f"the job asks for {job.nodes_text} nodes but cluster {cluster!r} "
                             f"lists {len(profile.hosts)} host(s)", field="nodes")
        # The first hosts listed that were not lost in an earlier attempt; with nodes: MIN-MAX, as
        # many as there are up to MAX, and at least MIN.
        left = [h for h in profile.hosts if host_port(h.address, h.port) not in ctx.excluded_hosts]
        if len(left) < job.min_nodes:
            raise InputError(f"cluster {cluster!r} has {len(left)} of its {len(profile.hosts)} "
                             f"hosts left ({', '.join(ctx.excluded_hosts)} lost); the job needs "
                             f"{job.min_nodes} (nodes: {job.nodes_text})", field="nodes")
        nodes = tuple(NodeTarget(i, h.address, h.port, h.user, h.identity_file)
                      for i, h in enumerate(left[:job.nodes]))
        shared = profile.shared_filesystem
        return Placement(nnodes=len(nodes),
                         nproc_per_node=job.procs_per_node or profile.default_procs_per_node(),
                         device=profile.device, rdzv_host=nodes[0].address,
                         rdzv_port=profile.rdzv_port,
                         workdir_base=profile.remote_workdir if shared else None,
                         own_run_root=None if shared else profile.remote_workdir, nodes=nodes,
                         standby=True)

    def attempt_launcher(self, submission: Submission) -> Any:
        from fsdp_orch.backends.over_ssh.launcher import SshLauncher

        return SshLauncher(submission)

    def preflight(self, submission: Submission) -> None:
        """Every host answers, with a known key, before anything is recorded as started."""
        from fsdp_orch.backends.over_ssh.connect import connect, on_every_host, run_on

        profile = self.profile_of(submission)
        hosts = list(profile.hosts[:submission.job.nodes])
        if profile.shared_filesystem:
            on_every_host(hosts, lambda i, host: connect(host, profile).close())
            return
        # hosts with their own disks: the run folder each will hold, checked before the job starts
        from fsdp_orch.backends.over_ssh.attempt import own_disk_run_dir
        from fsdp_orch.places.remote_trust import REFUSED_EXIT, check_command

        command = check_command(own_disk_run_dir(profile, submission.job_id) or "", "run folder")

        def check(i: int, host: Any) -> None:
            result = run_on(host, profile, command, timeout=profile.connect_timeout + 30)
            if result.return_code == REFUSED_EXIT:
                raise InputError(f"{result.stderr.strip()}; another account could replace the "
                                 "scripts the host runs as you there: set remote_workdir to a "
                                 "folder of yours (or one made only by you in a sticky scratch)",
                                 field="remote_workdir")
        on_every_host(hosts, check)

    def leftovers(self, job_id: str, row: JobStatus) -> bool:
        # the supervisor stops every host's processes itself; stop_leftovers sweeps after it
        return False

    def stop_leftovers(self, job_id: str, row: JobStatus) -> None:
        """Every process of the job on every host, whatever attempt
        (the supervisor may have died)."""
        from fsdp_orch.backends.over_ssh.attempt import stop_job_everywhere

        stop_job_everywhere(self.profile_of(Submission.load(Path(row.run_dir), self)), job_id)

    def doctor(self, profile: SshProfile, torch_version: str | None, run: Runner) -> list[Check]:
        from fsdp_orch.backends.remote_doctor import ssh_checks

        return ssh_checks(profile, torch_version, run)

    def artifacts(self, plan: LaunchPlan, templates: Templates) -> list[Artifact]:
        out = [Artifact(f"{plan.attempt_dir}/hosts.txt", templates("ssh-hosts.txt.j2"))]
        for node in plan.nodes:
            out.append(Artifact(f"{plan.attempt_dir}/node-{node.rank}.sh",
                                templates(templates.main, node=node), True))
        return out


KIND = SshKind()
