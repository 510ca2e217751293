"""The Kubernetes kind, its planning side: each attempt is an Indexed Job of one pod per node
(completions = parallelism = nodes, no retry of its own: the supervisor restarts) with a headless
Service that gives pod 0 the stable name the rendezvous uses, or a JobSet of one replicated Job
where the profile asks for it. Every pod runs the attempt's ``node.sh`` from the run folder, on the
volume the supervisor and the pods share (``run_volume``); its node rank is the pod's completion
index. The manifests are artifacts of the attempt (``k8s-job.yaml``, ``k8s-service.yaml`` or
``k8s-jobset.yaml``), rendered from templates as every kind's scripts are.

The doing side: the supervisor runs detached beside the CLI, as on the local and SSH kinds
(``SupervisedHere``), or, with ``supervisor.runs: cluster``, in a pod of its own made by a Job of
its own (``supervisor-job.yaml``, rendered with the first attempt's artifacts, as SLURM's batch
script is), which Kubernetes restarts; either creates, watches and deletes each attempt's objects
through the API server (``launcher``). ``status`` asks the API server about a supervisor in the
cluster (its Job gone or failed before the job's end was recorded: FAILED), as SLURM's sacct.
Submit asks the server for a dry run of the first attempt's objects (``dryRun=All``: admission,
quota, validation) before anything is created; cancel deletes every object with the job's label.
What a pod's status means is ``pod_endings``'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdp_orch.backends.kubernetes.manifest import (
    env_secret_name,
    manifests,
    object_names,
    supervisor_job_name,
    supervisor_manifest,
    yaml_value,
)
from fsdp_orch.backends.kubernetes.profile import KubernetesProfile, within
from fsdp_orch.backends.supervised_here import CANCEL_WAIT_S, SupervisedHere
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.launch.plan import LaunchPlan
from fsdp_orch.launch.plan_inputs import Placement, PlanContext, fixed_node_count
from fsdp_orch.launch.render import Artifact, Templates, write_artifacts
from fsdp_orch.launch.submission import PlannedAttempt, Submission
from fsdp_orch.observe.command import Runner
from fsdp_orch.record.index import JobIndex
from fsdp_orch.record.status import JobStatus
from fsdp_orch.vocab.checks import Check
from fsdp_orch.vocab.errors import FsdpOrchError, InputError

NODE_SCRIPT = "node.sh"
JOB_MANIFEST = "k8s-job.yaml"
SERVICE_MANIFEST = "k8s-service.yaml"
JOBSET_MANIFEST = "k8s-jobset.yaml"
SUPERVISOR_MANIFEST = "supervisor-job.yaml"  # in the run folder: the job's, not an attempt's
COLD = ("each attempt is a new set of pods (a warm standby would need pods kept between "
        "attempts: not built)")


class KubernetesKind(SupervisedHere[KubernetesProfile]):
    name = "kubernetes"
    profile_model = KubernetesProfile
    main_template = "k8s-node.sh.j2"

    def __init__(self) -> None:
        self._connections: dict[str, tuple[Any, KubernetesProfile]] = {}
        self._profiles: dict[str, KubernetesProfile] = {}

    def place(self, job: JobSpec, profile: KubernetesProfile, cluster: str,
              ctx: PlanContext) -> Placement:
        fixed_node_count(job, "an Indexed Job runs a fixed number of pods (completions = "
                              "parallelism = nodes)")
        names = object_names(ctx.job_id, ctx.attempt, profile.use_jobset)
        clash = sorted(set(job.env) & {entry.env for entry in profile.env_from_secrets})
        if clash:
            raise InputError(f"{clash[0]} is also in env_from_secrets of cluster {cluster!r}; "
                             "expected each variable in one of them", field="env")
        return Placement(nnodes=job.nodes,
                         nproc_per_node=job.procs_per_node or profile.default_procs_per_node(),
                         device=profile.device_name(),
                         rdzv_host=profile.rdzv_host or names.rank0_host,
                         workdir_base=profile.workdir, standby=False, standby_cold_because=COLD)

    def artifacts(self, plan: LaunchPlan, templates: Templates) -> list[Artifact]:
        """The script every pod runs, then the manifests of the attempt's objects."""
        profile = self.profile_of(plan)
        check_volumes(plan, profile)
        node_script = f"{plan.attempt_dir}/{NODE_SCRIPT}"
        k8s = manifests(plan, profile, node_script)
        node_addr = node_address(plan, profile)
        out = [Artifact(node_script, templates(templates.main, k8s=k8s, node_addr=node_addr),
                        True)]
        if profile.supervisor_in_cluster:
            out.append(Artifact(f"{plan.run_dir}/{SUPERVISOR_MANIFEST}",
                                templates("k8s-supervisor.yaml.j2",
                                          sup=supervisor_manifest(plan, profile), y=yaml_value)))
        if profile.use_jobset:
            return out + [Artifact(f"{plan.attempt_dir}/{JOBSET_MANIFEST}",
                                   templates("k8s-jobset.yaml.j2", k8s=k8s, y=yaml_value))]
        return out + [Artifact(f"{plan.attempt_dir}/{JOB_MANIFEST}",
                               templates("k8s-job.yaml.j2", k8s=k8s, y=yaml_value)),
                      Artifact(f"{plan.attempt_dir}/{SERVICE_MANIFEST}",
                               templates("k8s-service.yaml.j2", k8s=k8s, y=yaml_value))]

    def attempt_launcher(self, submission: Submission) -> Any:
        from fsdp_orch.backends.kubernetes.launcher import KubernetesLauncher

        return KubernetesLauncher(submission)

    def start(self, index: JobIndex, submission: Submission, first: PlannedAttempt) -> None:
        """The API server's dry run of the first attempt's objects (and of the supervisor's Job),
        then the supervisor: beside the CLI, or its Job in the cluster."""
        from fsdp_orch.backends.kubernetes.api import connect, create_all, manifests_in

        profile = self.profile_of(submission)
        api = connect(profile.kubeconfig, profile.context, profile.namespace)
        own = manifests_in(first.artifacts, SUPERVISOR_MANIFEST)  # none: beside the CLI
        create_all(api, manifests_in(first.artifacts) + own, dry_run=True)
        if not own:
            super().start(index, submission, first)
            return
        from fsdp_orch.backends.kubernetes.in_cluster import start_in_cluster

        write_artifacts([a for a in first.artifacts if a.name == SUPERVISOR_MANIFEST])
        start_in_cluster(api, profile, first.plan, own)
        index.journal(submission.job_id).scheduled(
            f"k8s:Job/{supervisor_job_name(submission.job_id)}")

    def refresh(self, index: JobIndex, rows: list[JobStatus]) -> list[str]:
        """A supervisor beside the CLI that died is re-attached (``SupervisedHere``); one in the
        cluster is Kubernetes' to restart: its Job gone or failed before the job's end was
        recorded, the job is FAILED with why."""
        from fsdp_orch.backends.kubernetes.in_cluster import settle

        there = [row for row in rows if self._in_cluster(row)]
        here = [row for row in rows if row not in there]
        settled = []
        for row in there:
            try:
                api = self._connected(row)[0]
            except FsdpOrchError:  # no kubeconfig here (another machine): no word, no verdict
                continue
            if settle(index, row, api):
                settled.append(row.id)
        return super().refresh(index, here) + settled

    def cancel(self, index: JobIndex, row: JobStatus) -> str:
        """A supervisor in the cluster sees the cancel in the run folder and stops the attempt;
        once its Job has ended (or after CANCEL_WAIT_S), every object of the job is deleted."""
        if not self._in_cluster(row):
            return super().cancel(index, row)
        from fsdp_orch.backends.kubernetes.in_cluster import wait_for_supervisor

        ended = index.request_cancel(row.id)
        if ended:
            return f"{row.id} already ended ({ended})"
        wait_for_supervisor(self._connected(row)[0], row.id, CANCEL_WAIT_S)
        self.stop_leftovers(row.id, row)
        return f"{row.id} cancelled"

    def _in_cluster(self, row: JobStatus) -> bool:
        """From the job's recorded profile; nothing asked of the API server."""
        return self._profile(row).supervisor_in_cluster

    def _profile(self, row: JobStatus) -> KubernetesProfile:
        """The job's profile as submit recorded it, read once per job."""
        if row.run_dir not in self._profiles:
            self._profiles[row.run_dir] = self.profile_of(Submission.load(Path(row.run_dir), self))
        return self._profiles[row.run_dir]

    def leftovers(self, job_id: str, row: JobStatus) -> bool:
        return bool(self._objects(row))

    def stop_leftovers(self, job_id: str, row: JobStatus) -> None:
        """Every object with the job's label, whatever the attempt (the supervisor may have died):
        its Jobs (and their pods), Services and its Secret."""
        api, _ = self._connected(row)
        for kind, name in self._objects(row):
            api.delete(kind, name)

    def _connected(self, row: JobStatus) -> tuple[Any, KubernetesProfile]:
        """The job's API server and profile, connected once per job (cancel asks every 0.1 s)."""
        from fsdp_orch.backends.kubernetes.api import connect

        if row.run_dir not in self._connections:
            profile = self._profile(row)
            self._connections[row.run_dir] = (
                connect(profile.kubeconfig, profile.context, profile.namespace), profile)
        return self._connections[row.run_dir]

    def _objects(self, row: JobStatus) -> list[tuple[str, str]]:
        from fsdp_orch.backends.kubernetes.launcher import job_selector

        api, profile = self._connected(row)
        found: list[tuple[str, str]] = api.labelled(job_selector(row.id), profile.use_jobset)
        secret = env_secret_name(row.id)
        return found + ([("Secret", secret)] if api.secret_exists(secret) else [])

    def doctor(self, profile: KubernetesProfile, torch_version: str | None,
               run: Runner) -> list[Check]:
        from fsdp_orch.backends.kubernetes.doctor import kubernetes_checks

        return kubernetes_checks(profile, torch_version, run)


def node_address(plan: LaunchPlan, profile: KubernetesProfile) -> str | None:
    """What each pod names itself to torchrun's rendezvous: on a pod network its stable name
    ("pod-name"), which the other pods resolve; on the host network of one machine (a loopback
    rendezvous host) a loopback address of its own ("loopback"); else torchrun's own guess."""
    if plan.launcher != "torchrun":
        return None
    if not profile.host_network:
        return "pod-name"
    if (plan.rdzv_host or "").startswith("127.") and plan.nnodes < 255:
        return "loopback"
    return None


def check_volumes(plan: LaunchPlan, profile: KubernetesProfile) -> None:
    """What the pods must find on the profile's volumes, at the paths the plan names: the run
    folder (on ``run_volume``), the job's folder (unless the image holds it: ``workdir``) and,
    for a job that resumes, a writable checkpoint folder (one in the pod's own filesystem is
    gone with the pod). An InputError naming the folder and what to change."""
    run = next(v for v in profile.volumes if v.name == profile.run_volume)
    if not within(plan.attempt_dir, run.mount_path):
        raise InputError(f"the run folder {plan.run_dir} is not on run_volume {run.name!r} "
                         f"(mounted at {run.mount_path}); expected a shared_dir under it",
                         field="shared_dir")
    mounts = ", ".join(f"{v.name} at {v.mount_path}" for v in profile.volumes)
    if profile.workdir is None and profile.volume_of(plan.workdir) is None:
        raise InputError(f"the job's folder {plan.workdir} is on none of the cluster's volumes "
                         f"({mounts}), so no pod would find it; expected it under one of them, or "
                         "the profile's workdir: the folder the image holds the job's code in",
                         field="workdir")
    if plan.job.checkpoint.resume == "never":
        return
    volume = profile.volume_of(plan.checkpoint_dir)
    if volume is None or volume.read_only:
        where = ("on none of the cluster's volumes" if volume is None
                 else f"on volume {volume.name!r}, which is read_only")
        raise InputError(f"the checkpoint folder {plan.checkpoint_dir} is {where}: its "
                         f"checkpoints would be gone with the pod; expected a checkpoint.dir on a "
                         f"writable volume ({mounts})", field="checkpoint.dir")


KIND = KubernetesKind()
