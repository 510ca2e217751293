"""What the Kubernetes kind's tests share: a profile for the session's namespace on the test
cluster, and the objects a job left there."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli_harness import Cli

if TYPE_CHECKING:
    from conftest import K8sCluster

TWO_PODS = ["--set", "nodes=2", "--set", "procs_per_node=1", "--set", "checkpoint.interval=5",
            "--set", "restart.backoff.initial=1s", "--set", "restart.backoff.jitter=0",
            "--set", "watch.heartbeat_timeout=10s", "--set", "watch.startup_timeout=120s"]
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")


def write_profile(cli: Cli, cluster: K8sCluster, work: Path, name: str = "k8s",
                  **fields: Any) -> Path:
    """A profile for the session's namespace: the host network, this session's Python and ``work``
    (the job's folder and the run folders) mounted at the same paths as on this machine."""
    volumes = [{"name": "work", "mount_path": str(work), "host_path": str(work)}]
    volumes += [{"name": f"host{i}", "mount_path": p, "host_path": p, "read_only": True}
                for i, p in enumerate(cluster.host_paths)]
    doc: dict[str, Any] = {
        "kind": "kubernetes", "kubeconfig": str(cluster.kubeconfig),
        "namespace": cluster.namespace, "image": cluster.image, "image_pull_policy": "Never",
        "python": cluster.python, "resources": {"cpu": "950m", "memory": "2Gi", "gpus": 0},
        # no cluster DNS here to resolve pod 0's stable name: one node, the host network
        "host_network": True, "rdzv_host": "127.0.0.1", "volumes": volumes, "run_volume": "work",
        "shared_dir": str(work / "shared"), "device": "cpu",
        "env": {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"},
        "unschedulable_timeout": 60, **fields}
    folder = cli.cwd / "clusters"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def objects_of(cluster: K8sCluster, job_id: str) -> list[str]:
    """Jobs, Services, Secrets and pods (not yet gone) with the job's label."""
    from kubernetes import client

    api = cluster.api_client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    selector, ns = f"fsdp-orch/job-id={job_id}", cluster.namespace
    found = [f"Job/{j.metadata.name}"
             for j in batch.list_namespaced_job(ns, label_selector=selector).items]
    found += [f"Service/{s.metadata.name}"
              for s in core.list_namespaced_service(ns, label_selector=selector).items]
    found += [f"Secret/{s.metadata.name}"
              for s in core.list_namespaced_secret(ns, label_selector=selector).items]
    return found


def pods_of(cluster: K8sCluster, job_id: str, attempt: int | None = None) -> list[Any]:
    from kubernetes import client

    selector = f"fsdp-orch/job-id={job_id}"
    if attempt is not None:
        selector += f",fsdp-orch/attempt={attempt}"
    return client.CoreV1Api(cluster.api_client()).list_namespaced_pod(
        cluster.namespace, label_selector=selector).items


def server_port(cluster: K8sCluster) -> str:
    import yaml

    server = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    return str(server.rsplit(":", 1)[1])


def wait_for_no_objects(cluster: K8sCluster, job_id: str, within: float = 30) -> list[str]:
    """The job's objects left after ``within`` seconds (a supervisor's Job goes a moment after
    the job's end: ttlSecondsAfterFinished)."""
    deadline = time.monotonic() + within
    while (left := objects_of(cluster, job_id)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left
