"""Smoke tests of the real test Kubernetes cluster, through the official Python client: what a
Kubernetes backend's tests would rely on (Indexed Jobs on the host network, logs, exit codes)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

if TYPE_CHECKING:  # tests/ is no package: the fixture's class is for readers and type checkers
    from conftest import K8sCluster

pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.root]

T = TypeVar("T")


def wait_until(what: str, probe: Callable[[], T | None], timeout: float = 90) -> T:
    """Poll ``probe`` until it returns something other than None; return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.3)


def describe_pods(core: Any, namespace: str, selector: str) -> str:
    """Pods' phases and container states, and the namespace's events: the cause of a timeout."""
    lines = []
    for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
        states = [(s.name, s.state.to_dict()) for s in pod.status.container_statuses or []]
        lines.append(f"{pod.metadata.name}: {pod.status.phase} {states}")
    for event in core.list_namespaced_event(namespace).items:
        lines.append(f"event {event.involved_object.name}: {event.reason}: {event.message}")
    return "\n".join(lines)


def test_indexed_job_runs_each_index_once(k8s_cluster: K8sCluster) -> None:
    from kubernetes import client

    api = k8s_cluster.api_client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    ns, name = k8s_cluster.namespace, "indexed"
    code = ("import os, sys; print('rank', os.environ['JOB_COMPLETION_INDEX'], "
            "sys.version_info[:2] >= (3, 10), flush=True)")
    container = k8s_cluster.container("rank", [k8s_cluster.python, "-c", code],
                                      env=[client.V1EnvVar(name="MASTER_ADDR", value="127.0.0.1")])
    batch.create_namespaced_job(ns, client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            completions=2, parallelism=2, completion_mode="Indexed", backoff_limit=0,
            template=client.V1PodTemplateSpec(spec=k8s_cluster.pod_spec(container)))))

    def finished() -> Any:
        status = batch.read_namespaced_job_status(name, ns).status
        return status if status.succeeded == 2 or status.failed else None

    selector = f"job-name={name}"
    try:
        status = wait_until(f"job {name} to finish", finished)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{describe_pods(core, ns, selector)}") from None
    assert status.succeeded == 2 and not status.failed, describe_pods(core, ns, selector)
    pods = core.list_namespaced_pod(ns, label_selector=selector).items
    logs = {}
    for pod in pods:
        index = pod.metadata.annotations["batch.kubernetes.io/job-completion-index"]
        assert pod.spec.host_network and pod.status.phase == "Succeeded"
        logs[index] = core.read_namespaced_pod_log(pod.metadata.name, ns).strip()
    assert logs == {"0": "rank 0 True", "1": "rank 1 True"}


def test_pod_exit_code_is_reported(k8s_cluster: K8sCluster) -> None:
    from kubernetes import client

    core = client.CoreV1Api(k8s_cluster.api_client())
    ns, name = k8s_cluster.namespace, "exits-3"
    container = k8s_cluster.container("main", ["/bin/sh", "-c", "echo going; exit 3"])
    core.create_namespaced_pod(ns, client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"test": name}),
        spec=k8s_cluster.pod_spec(container)))

    def ended() -> Any:
        pod = core.read_namespaced_pod_status(name, ns)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    try:
        pod = wait_until(f"pod {name} to end", ended)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{describe_pods(core, ns, f'test={name}')}") from None
    assert pod.status.phase == "Failed"
    [state] = pod.status.container_statuses
    assert state.state.terminated.exit_code == 3
    assert state.state.terminated.reason == "Error"
    assert core.read_namespaced_pod_log(name, ns).strip() == "going"
