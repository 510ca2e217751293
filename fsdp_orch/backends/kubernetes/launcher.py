"""The Kubernetes kind's attempts, as the supervisor runs them (beside the CLI or in its pod): each
attempt's manifests are created through the API (all or none), its pods followed by one watch
(``pod_watch``), its ranks observed through their node agents, which connect back to this
supervisor (``node_channel``), and its logs and checkpoints read from the run folder on the volume
the pods share with it.

The job's own Secret (the values its ``env:`` takes by reference) is made from this supervisor's
environment, where submit handed them, before the first attempt (a supervisor in the cluster finds
it made by submit), and deleted when the job ends.
An attempt's objects are deleted once it has ended (its logs are in the run folder already)."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from fsdp_orch.backends.base import EngineEnding
from fsdp_orch.backends.kubernetes.api import (
    IN_CLUSTER_ENV,
    Api,
    connect,
    create_all,
    manifests_in,
)
from fsdp_orch.backends.kubernetes.attempt_state import (
    attempt_state,
    completion_index,
    ended_in_error,
)
from fsdp_orch.backends.kubernetes.manifest import (
    ATTEMPT_LABEL,
    JOB_ID_LABEL,
    env_secret_manifest,
    env_secret_name,
    job_label,
    object_name,
)
from fsdp_orch.backends.kubernetes.pod_watch import PodWatch
from fsdp_orch.backends.kubernetes.profile import KubernetesProfile
from fsdp_orch.backends.node_channel import AgentObservation
from fsdp_orch.checkpoints.storage import LOCAL, Storage
from fsdp_orch.launch.plan import LaunchPlan
from fsdp_orch.launch.render import Artifact, write_artifacts
from fsdp_orch.launch.submission import Submission
from fsdp_orch.observe.file_tail import LogChunk
from fsdp_orch.vocab.categories import FailureCategory
from fsdp_orch.vocab.errors import FsdpOrchError

log = logging.getLogger(__name__)

POD_LOG_LINES = 50
SERVER_AWAY_S = 60.0  # the API server silent this long while the attempt runs: a lost node


def attempt_selector(job_id: str, attempt: int) -> str:
    return f"{JOB_ID_LABEL}={job_label(job_id)},{ATTEMPT_LABEL}={attempt}"


def any_attempt_selector(job_id: str) -> str:
    """The objects of every attempt of the job (not its Secret, not its supervisor's Job)."""
    return f"{JOB_ID_LABEL}={job_label(job_id)},{ATTEMPT_LABEL}"


def attempt_objects(job_id: str, attempt: int, jobset: bool) -> list[tuple[str, str]]:
    """(kind, name) of what an attempt creates, by its names (``manifest.object_names``)."""
    name = object_name(job_id, attempt)
    return [("JobSet", name)] if jobset else [("Job", name), ("Service", name)]


def job_selector(job_id: str) -> str:
    """Every object of the job, whatever the attempt (and only this job's)."""
    return f"{JOB_ID_LABEL}={job_label(job_id)}"


def outbound_address(server: str) -> str:
    """This machine's IPv4 address on the way to the API server (``https://HOST:PORT``): the one
    the pods' node agents reach the supervisor at, unless the profile names one
    (``supervisor_address``; an IPv6-only cluster must); 127.0.0.1 for a server on this machine's
    loopback, or where no route is found."""
    host = urlsplit(server).hostname or "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 443))  # UDP: no packet is sent, the route is chosen
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


class KubernetesAttempt(AgentObservation):
    def __init__(self, submission: Submission, attempt: int, api: Api,
                 objects: list[tuple[str, str]], announce: str, unschedulable_timeout: float,
                 nnodes: int):
        super().__init__(submission.run_dir, attempt, Path(submission.attempt_dir(attempt)),
                         bind="0.0.0.0" if announce != "127.0.0.1" else "127.0.0.1",
                         announce=announce, node_timeout=submission.job.watch.node_timeout)
        self.api = api
        self.objects = objects  # (kind, name) of what this attempt created
        self.nnodes = nnodes
        self.unschedulable_timeout = unschedulable_timeout
        self.watch = PodWatch(api, attempt_selector(submission.job_id, attempt))
        self.started = time.monotonic()
        self._ending: EngineEnding | None = None
        self._pod_logs_read: set[str] = set()
        self._waiting: str | None = None
        self._deleted = False

    @property
    def ref(self) -> str:
        return "k8s:" + ",".join(f"{kind}/{name}" for kind, name in self.objects)

    def poll(self) -> int | None:
        state = attempt_state(self.watch.pods(), self.nnodes)
        self._waiting = state.pending_why
        if state.ended_by is not None:
            self._ending = state.ended_by
        elif (state.exit_code is None and state.pending_why is not None
              and time.monotonic() - self.started > self.unschedulable_timeout):
            self._ending = EngineEnding(
                FailureCategory.NODE_SETUP_ERROR,
                f"not scheduled within unschedulable_timeout ({self.unschedulable_timeout:g} s): "
                f"{state.pending_why}", retryable=False)
            return 1
        return self.judge_exit(state.exit_code)

    def ended_by(self) -> EngineEnding | None:
        return self._ending

    def waiting_for(self) -> str | None:
        return self._waiting

    def log_chunks(self) -> list[LogChunk]:
        """The agents' and the run folder's logs, and the pod log of each pod that ended in error:
        what node.sh said before its output went to the node's console (a node setup error)."""
        chunks = super().log_chunks()
        for name, pod in self.watch.pods().items():
            if name in self._pod_logs_read or not ended_in_error(pod):
                continue
            self._pod_logs_read.add(name)
            text = self.api.pod_log(name, POD_LOG_LINES)
            if text:
                chunks.append((f"console-node-{completion_index(pod)}.log", text.encode()))
        return chunks

    def stop(self, grace: float) -> None:
        self.stop_ranks(grace)
        self._delete_objects()

    def close(self) -> None:
        self.watch.close()
        self._delete_objects()
        super().close()

    def _delete_objects(self) -> None:
        """The attempt's Job and Service, then its pods still there, at once: their ranks were
        stopped, with their grace, through the node agents, and a pod's own 30 s would hold its
        node from the next attempt's pods. The pods are listed after the Job is gone: its
        controller replaces a pod deleted under it until then."""
        if self._deleted:
            return
        self._deleted = True
        try:
            for kind, name in self.objects:
                self.api.delete(kind, name)
            for pod in self.api.pods(self.watch.selector):
                if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    self.api.delete("Pod", pod["metadata"]["name"], grace_s=0)
        except FsdpOrchError as exc:  # the API server away: cancel sweeps by label later
            log.warning(f"fsdp-orch supervisor: could not delete attempt {self.attempt}'s "
                        f"objects: {exc}")


class KubernetesLauncher:
    def __init__(self, submission: Submission):
        self.submission = submission
        profile = submission.profile
        assert isinstance(profile, KubernetesProfile)
        self.profile = profile
        self.api = connect(profile.kubeconfig, profile.context, profile.namespace)
        self._secret_made = False

    @property
    def checkpoints(self) -> Storage:
        return LOCAL

    def port_for_attempt(self, attempt: int) -> int | None:
        return None

    def machines(self, attempt: int, say: Callable[[str], None]) -> tuple[str, ...]:
        return ()

    def leaves_out_nodes(self) -> bool:
        return False

    def job_ending(self) -> None:
        """The job's own Secret, once no attempt will run again."""
        try:
            self.api.delete("Secret", env_secret_name(self.submission.job_id))
        except FsdpOrchError as exc:
            log.warning(f"fsdp-orch supervisor: could not delete the job's Secret: {exc}")

    def requeue_without(self, left_out: tuple[str, ...]) -> Callable[[], str] | None:
        return None

    def adopt(self, attempt: int, ref: str | None) -> KubernetesAttempt:
        """The attempt whose objects are still there (a supervisor re-attached): its own objects,
        by their names, whatever ``ref`` says (a supervisor that ended between the attempt's start
        and its launch left the job's earlier ref, or the supervisor's own Job's)."""
        return self._attempt(attempt, attempt_objects(self.submission.job_id, attempt,
                                                      self.profile.use_jobset),
                             self.submission.base_plan.nnodes)

    def launch(self, plan: LaunchPlan, artifacts: list[Artifact]) -> KubernetesAttempt:
        write_artifacts(artifacts)
        if plan.secret_env and not self._secret_made:
            # made once per job, from this supervisor's environment, where submit handed the
            # values; already there for a re-attached supervisor, or one in the cluster (submit
            # made it: that supervisor's environment has none of them)
            if not self.api.secret_exists(env_secret_name(plan.job_id)):
                values = {name: os.environ[name] for name, _ in plan.secret_env
                          if name in os.environ}
                self.api.create(env_secret_manifest(plan, self.profile, values))
            self._secret_made = True
        self._sweep_before(plan.attempt)
        manifests = manifests_in(artifacts)
        attempt = self._attempt(plan.attempt,
                                [(m["kind"], m["metadata"]["name"]) for m in manifests],
                                plan.nnodes)
        try:
            create_all(self.api, manifests)
        except BaseException:
            attempt.watch.close()
            attempt.channel.close()
            raise
        return attempt

    def _sweep_before(self, attempt: int) -> None:
        """The objects of earlier attempts still there (a supervisor that ended after it made an
        attempt's objects and before it recorded them): deleted before this attempt's, so that no
        two attempts ever train at once."""
        job_id, jobset = self.submission.job_id, self.profile.use_jobset
        own = attempt_objects(job_id, attempt, jobset)
        stale = [found for found in self.api.labelled(any_attempt_selector(job_id), jobset)
                 if found not in own]
        for kind, name in stale:
            log.warning(f"fsdp-orch supervisor: deleting {kind} {name}, left by an earlier "
                        f"attempt, before attempt {attempt}")
            self.api.delete(kind, name, grace_s=0)

    def _attempt(self, attempt: int, objects: list[tuple[str, str]],
                 nnodes: int) -> KubernetesAttempt:
        return KubernetesAttempt(
            self.submission, attempt, self.api, objects,
            # in the supervisor's own pod: its address on the way to the API server (the profile's
            # supervisor_address is the submitting machine's, for a supervisor beside the CLI)
            announce=((None if os.environ.get(IN_CLUSTER_ENV) else self.profile.supervisor_address)
                      or outbound_address(self.api.server)),
            unschedulable_timeout=float(self.profile.unschedulable_timeout), nnodes=nnodes)


__all__ = ["KubernetesAttempt", "KubernetesLauncher", "any_attempt_selector", "attempt_objects",
           "attempt_selector", "job_selector"]
