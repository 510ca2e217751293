"""The supervisor in the cluster (``supervisor.runs: cluster``), in its pure and local parts: the
profile's checks, its Job's manifest read back, the launcher never making that Job per attempt,
``status`` settling a job whose supervisor's Job is gone before the job's end was recorded (and
nothing else), and the job's lock a new supervisor pod waits for while the old pod ends. The live
behaviour is tests/k8s/test_k8s_supervisor_pod.py's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_k8s_render import render_case

from fsdp_orch.backends.kubernetes.api import IN_CLUSTER_ENV, manifests_in
from fsdp_orch.backends.kubernetes.in_cluster import settle
from fsdp_orch.backends.kubernetes.kind import SUPERVISOR_MANIFEST
from fsdp_orch.backends.kubernetes.manifest import ATTEMPT_LABEL, ROLE_LABEL
from fsdp_orch.backends.kubernetes.profile import KubernetesProfile
from fsdp_orch.supervise.process import take_lock
from fsdp_orch.vocab.errors import FsdpOrchError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BASE = {"kind": "kubernetes", "image": "img:1", "shared_dir": "/srv/runs", "run_volume": "srv",
        "volumes": [{"name": "srv", "mount_path": "/srv", "host_path": "/srv"}]}


def in_cluster_artifacts() -> list[Any]:
    return list(render_case("kubernetes-in-cluster", "torchrun"))


def test_runs_cluster_needs_a_service_account_and_an_api_server_is_https_host_port() -> None:
    with pytest.raises(ValueError, match="supervisor.service_account"):
        KubernetesProfile.model_validate({**BASE, "supervisor": {"runs": "cluster"}})
    for bad in ("http://127.0.0.1:6443", "https://127.0.0.1", "127.0.0.1:6443",
                "https://h:6443/api"):
        with pytest.raises(ValueError, match="https://HOST:PORT"):
            KubernetesProfile.model_validate({**BASE, "supervisor": {
                "runs": "cluster", "service_account": "sup", "api_server": bad}})
    good = KubernetesProfile.model_validate({**BASE, "supervisor": {
        "runs": "cluster", "service_account": "sup", "api_server": "https://10.0.0.1:443/"}})
    assert good.supervisor_in_cluster and good.supervisor.api_server == "https://10.0.0.1:443"
    assert not KubernetesProfile.model_validate(BASE).supervisor_in_cluster


def test_the_supervisors_job_reads_back_as_one_restarted_pod_with_a_token_and_no_attempt() -> None:
    artifacts = in_cluster_artifacts()
    [own] = manifests_in(artifacts, SUPERVISOR_MANIFEST)
    [art] = [a for a in artifacts if a.name == SUPERVISOR_MANIFEST]
    assert art.path == "/srv/fsdp-orch/runs/j0123456789a/supervisor-job.yaml"
    assert own["kind"] == "Job" and own["metadata"]["name"] == "fsdp-orch-j0123456789a-supervisor"
    spec = own["spec"]
    assert spec["ttlSecondsAfterFinished"] == 0 and spec["backoffLimit"] == 20
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure"
    assert pod["serviceAccountName"] == "fsdp-orch-supervisor"
    assert pod["automountServiceAccountToken"] is True
    assert pod["securityContext"] == {"runAsUser": 1000, "runAsGroup": 1000}
    for labels in (own["metadata"]["labels"], spec["template"]["metadata"]["labels"]):
        assert labels[ROLE_LABEL] == "supervisor" and ATTEMPT_LABEL not in labels
    [container] = pod["containers"]
    command = container["command"]
    assert command[:3] == ["bash", "-c", 'umask 077; exec "$@" >>"$0" 2>&1']
    assert command[3] == "/srv/fsdp-orch/runs/j0123456789a/supervisor.log"
    assert command[4:] == ["/usr/bin/python3", "-m", "fsdp_orch.supervise.supervisor",
                           "j0123456789a", "--run-dir", "/srv/fsdp-orch/runs/j0123456789a",
                           "--in-cluster"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {IN_CLUSTER_ENV: "1",
                   "FSDP_ORCH_HOME": "/srv/fsdp-orch/runs/j0123456789a/supervisor-home",
                   "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "1Gi"},
                                      "limits": {"memory": "1Gi"}}
    # what each attempt creates leaves it out: the supervisor is made once, at submit
    assert {m["kind"] for m in manifests_in(artifacts)} == {"Job", "Service"}
    assert all(m["metadata"]["name"].endswith("-a1") for m in manifests_in(artifacts))


class FakeApi:
    def __init__(self, ended: str | None | Exception):
        self.ended = ended
        self.asked: list[str] = []

    def job_ended(self, name: str) -> str | None:
        self.asked.append(name)
        if isinstance(self.ended, Exception):
            raise self.ended
        return self.ended


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Any, str, str]:
    from fsdp_orch.control.job_control import record_submission
    from fsdp_orch.control.submit_request import SubmitRequest
    from fsdp_orch.record.index import JobIndex
    from fsdp_orch.record.store import Store

    job = tmp_path / "job.yaml"
    job.write_text("name: n\nlauncher: python\ncommand: ['true']\n")
    home = tmp_path / "home"
    index = JobIndex(Store(home / "jobs.db"), [str(home / "runs")])
    job_id, _, _ = record_submission(index, SubmitRequest(job, "local", home_dir=home))
    index.journal(job_id).scheduled(f"k8s:Job/fsdp-orch-{job_id}-supervisor")
    index.journal(job_id).start_attempt(0, resume_from=None)
    [row] = index.store.active_jobs()
    (Path(row.run_dir) / "supervisor.log").write_text("fsdp-orch supervisor: resuming\n"
                                                      "Traceback: boom\n")
    return index, job_id, row.run_dir


def test_status_fails_a_job_whose_supervisors_job_is_gone_and_nothing_else(
        recorded: tuple[Any, str, str]) -> None:
    from fsdp_orch.record.events import EventWriter
    from fsdp_orch.record.journal import Journal
    from fsdp_orch.vocab.states import JobState

    index, job_id, run_dir = recorded
    [row] = index.store.active_jobs()
    # running, or an API server that does not answer: nothing is said
    for answer in (None, FsdpOrchError("kubernetes: the API server does not answer")):
        assert settle(index, row, FakeApi(answer)) is False
        assert json.loads(index.store.status_json(job_id))["state"] != "FAILED"
    # the supervisor recorded the job's end, then its Job went (ttlSecondsAfterFinished: 0)
    supervisor = Journal(EventWriter(run_dir, "supervisor"), job_id)
    supervisor.set_state(JobState.SUCCEEDED, reason=None, now=1000.0)
    assert settle(index, row, FakeApi("gone")) is False
    assert json.loads(index.store.status_json(job_id))["state"] == "SUCCEEDED"


def test_a_supervisors_job_gone_before_the_end_is_failed_with_its_last_line(
        recorded: tuple[Any, str, str]) -> None:
    index, job_id, _ = recorded
    [row] = index.store.active_jobs()
    api = FakeApi("Failed: BackoffLimitExceeded")
    assert settle(index, row, api) is True
    assert api.asked == [f"fsdp-orch-{job_id}-supervisor"]
    status = json.loads(index.store.status_json(job_id))
    assert status["state"] == "FAILED"
    assert f"fsdp-orch-{job_id}-supervisor ended (Failed: BackoffLimitExceeded)" in \
        status["reason"] and "its last line: Traceback: boom" in status["reason"]


def test_a_new_supervisor_pod_waits_for_the_lock_the_old_one_still_holds(tmp_path: Path) -> None:
    import fcntl

    path = tmp_path / "supervisor.lock"
    path.touch()
    with open(path, "a") as held, open(path, "a") as second:
        fcntl.flock(held, fcntl.LOCK_EX)
        now = [0.0]

        def sleep(seconds: float) -> None:
            now[0] += seconds
            if now[0] >= 2.0:  # the old pod's supervisor ends
                fcntl.flock(held, fcntl.LOCK_UN)

        assert take_lock(second, 0.0, sleep=sleep, clock=lambda: now[0]) is False
        assert now[0] == 0.0  # beside the CLI: no wait
        assert take_lock(second, 60.0, sleep=sleep, clock=lambda: now[0]) is True
        assert now[0] == 2.0
    with open(path, "a") as held, open(path, "a") as second:
        fcntl.flock(held, fcntl.LOCK_EX)
        now = [0.0]
        assert take_lock(second, 5.0, sleep=lambda s: now.__setitem__(0, now[0] + s),
                         clock=lambda: now[0]) is False
        assert now[0] == 5.0


def test_a_new_attempt_deletes_what_earlier_attempts_left_and_never_the_supervisors_job() -> None:
    """A supervisor that ended after it made an attempt's objects and before it recorded them left
    them running: the next one deletes them before its own attempt (no two attempts train at
    once); it asks only for objects with an attempt label, so the supervisor's Job and the job's
    Secret are never among them. An adopted attempt is its own objects, by name."""
    from types import SimpleNamespace

    from fsdp_orch.backends.kubernetes.launcher import (
        KubernetesLauncher,
        any_attempt_selector,
        attempt_objects,
    )

    class Listed:
        def __init__(self) -> None:
            self.deleted: list[tuple[str, str, int]] = []
            self.selectors: list[str] = []

        def labelled(self, selector: str, jobsets: bool = False) -> list[tuple[str, str]]:
            self.selectors.append(selector)
            return [("Job", "fsdp-orch-j1-a1"), ("Service", "fsdp-orch-j1-a1"),
                    ("Job", "fsdp-orch-j1-a2")]

        def delete(self, kind: str, name: str, grace_s: int = 5) -> bool:
            self.deleted.append((kind, name, grace_s))
            return True

    launcher = KubernetesLauncher.__new__(KubernetesLauncher)
    launcher.api = Listed()  # type: ignore[assignment]
    launcher.submission = SimpleNamespace(job_id="j1")  # type: ignore[assignment]
    launcher.profile = SimpleNamespace(use_jobset=False)  # type: ignore[assignment]
    launcher._sweep_before(2)
    assert launcher.api.selectors == ["fsdp-orch/job-id=j1,fsdp-orch/attempt"]  # type: ignore[attr-defined]
    assert launcher.api.deleted == [("Job", "fsdp-orch-j1-a1", 0),  # type: ignore[attr-defined]
                                    ("Service", "fsdp-orch-j1-a1", 0)]
    assert any_attempt_selector("j1") == "fsdp-orch/job-id=j1,fsdp-orch/attempt"
    assert attempt_objects("j1", 3, False) == [("Job", "fsdp-orch-j1-a3"),
                                              ("Service", "fsdp-orch-j1-a3")]
    assert attempt_objects("j1", 3, True) == [("JobSet", "fsdp-orch-j1-a3")]
