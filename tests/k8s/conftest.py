"""A real Kubernetes cluster (``tests/k8s/cluster.sh``) as a session fixture.

``k8s_cluster`` builds the binaries the first time (from the Kubernetes source tarball, cached in
/var/cache/fsdp-orch-k8s), installs the Debian packages (root + apt-get), starts etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, containerd and a kubelet on 127.0.0.1, and
stops what it started at the end. A cluster that was already running is reused and left running.
It skips only where the machine cannot run it (not Linux, not root, no Kubernetes source and no
apt-get...); with ``CI`` set it fails instead, so CI never skips these tests silently.

Another cluster: ``FSDP_ORCH_K8S_KUBECONFIG=PATH`` runs the tests there instead, and nothing is
started or stopped (a ``KUBECONFIG`` alone does not: a stray one must not send the tests
elsewhere). By default its pods run this session's Python from the local base image with hostPath
mounts, as on the test cluster: right for a second cluster.sh cluster on this machine. Elsewhere,
``FSDP_ORCH_K8S_IMAGE`` names an image with ``python3`` on its PATH (pulled as the cluster pulls);
the nodes must allow ``hostNetwork``.
Each session works in a namespace of its own, deleted at the end.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from machine_services import service

CLUSTER_SH = Path(__file__).resolve().with_name("cluster.sh")
REPO = Path(__file__).resolve().parents[2]
SRC_NAME = "kubernetes-v1.25.0-alpha.2-src.tar.gz"
# The first start builds Kubernetes (about 4 min on 2 cores, longer on a busy machine) and installs
# packages; later starts take well under a minute.
START_TIMEOUT_S = 1800
STOP_TIMEOUT_S = 180
LOCAL_IMAGE = "fsdp-orch.local/base:1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers",
                            "k8s: needs a real Kubernetes cluster (tests/k8s/cluster.sh)")


def source_tarball() -> Path | None:
    """The Kubernetes source cluster.sh builds from (the same places it looks: FSDP_ORCH_K8S_SRC,
    else shared/k8s/ in the repository or in any folder above it), or None."""
    given = os.environ.get("FSDP_ORCH_K8S_SRC", "")
    if given and Path(given).is_file():
        return Path(given)
    for folder in (REPO, *REPO.parents):
        if (folder / "shared" / "k8s" / SRC_NAME).is_file():
            return folder / "shared" / "k8s" / SRC_NAME
    return None


def cached_builds() -> list[Path]:
    """The complete builds in cluster.sh's cache (it starts the one there is without the source)."""
    cache = Path(os.environ.get("FSDP_ORCH_K8S_CACHE", "/var/cache/fsdp-orch-k8s"))
    names = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "pause")
    return [b for b in cache.glob("*/bin") if all((b / n).is_file() for n in names)]


def why_it_cannot_run() -> str | None:
    """Why this machine cannot run the test Kubernetes cluster, or None when it can."""
    if not sys.platform.startswith("linux"):
        return f"the test Kubernetes cluster needs Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return ("the test Kubernetes cluster needs root (it installs packages, runs containerd "
                "and the kubelet)")
    if source_tarball() is None and len(cached_builds()) != 1:
        return (f"no Kubernetes source to build the test cluster from ({SRC_NAME}: set "
                "FSDP_ORCH_K8S_SRC, or FSDP_ORCH_K8S_KUBECONFIG to use another cluster)")
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    if shutil.which("apt-get") is None and (shutil.which("etcd", path=path) is None
                                            or shutil.which("containerd", path=path) is None):
        return "etcd and containerd are not installed and there is no apt-get to install them"
    if shutil.which("gcc") is None and shutil.which("apt-get") is None:
        return "no gcc to build the pause image with"
    return None


@dataclass(frozen=True)
class K8sCluster:
    """The cluster the tests run on: its kubeconfig, the session's namespace, and how a pod runs
    this machine's Python (``python``, ``image``, the ``hostPath`` volumes it needs)."""

    kubeconfig: Path
    namespace: str
    image: str
    python: str
    local: bool  # the test cluster of cluster.sh (False: FSDP_ORCH_K8S_KUBECONFIG's)
    host_paths: tuple[str, ...] = field(default=())

    def api_client(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def volumes(self) -> list[Any]:
        """hostPath volumes (read-only in :meth:`volume_mounts`) with the Python of this session."""
        from kubernetes import client

        return [client.V1Volume(name=f"host{i}",
                                host_path=client.V1HostPathVolumeSource(path=p, type="Directory"))
                for i, p in enumerate(self.host_paths)]

    def volume_mounts(self) -> list[Any]:
        from kubernetes import client

        return [client.V1VolumeMount(name=f"host{i}", mount_path=p, read_only=True)
                for i, p in enumerate(self.host_paths)]

    def container(self, name: str, command: list[str], **kwargs: Any) -> Any:
        """A container of the session's image that can run :attr:`python`."""
        from kubernetes import client

        return client.V1Container(
            name=name, image=self.image, command=command, volume_mounts=self.volume_mounts(),
            image_pull_policy="Never" if self.image == LOCAL_IMAGE else "IfNotPresent", **kwargs)

    def pod_spec(self, *containers: Any, **kwargs: Any) -> Any:
        """A pod spec as the tests use them: host network, no service-account token, no restarts."""
        from kubernetes import client

        kwargs.setdefault("restart_policy", "Never")
        return client.V1PodSpec(containers=list(containers), host_network=True,
                                automount_service_account_token=False,
                                volumes=self.volumes() or None, **kwargs)


def python_host_paths() -> tuple[str, ...]:
    """Folders a pod mounts to run this session's Python: /usr, the repository, the environment
    (a venv) and the interpreter it was made from, none inside another."""
    wanted = sorted({"/usr", str(REPO), sys.prefix, os.path.realpath(sys.base_prefix),
                     os.path.dirname(os.path.realpath(sys.executable))})
    kept: list[str] = []
    for path in wanted:
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return tuple(kept)


@contextmanager
def _namespace(kubeconfig: Path) -> Iterator[str]:
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    name = f"fsdp-orch-test-{secrets.token_hex(3)}"
    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # the controller-manager gives every namespace its `default` service account; pods wait for it
    deadline = time.monotonic() + 60
    while not api.list_namespaced_service_account(name).items:
        assert time.monotonic() < deadline, f"namespace {name} got no service account in 60s"
        time.sleep(0.2)
    try:
        yield name
    finally:
        api.delete_namespace(name, propagation_policy="Foreground", grace_period_seconds=0)


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[K8sCluster]:
    """The test cluster (started or reused) or FSDP_ORCH_K8S_KUBECONFIG's; see the module doc."""
    other = os.environ.get("FSDP_ORCH_K8S_KUBECONFIG", "").strip()
    if other:
        kubeconfig = Path(other).expanduser()
        if not kubeconfig.is_file():
            pytest.fail(f"FSDP_ORCH_K8S_KUBECONFIG names no file: {kubeconfig}")
        image = os.environ.get("FSDP_ORCH_K8S_IMAGE", "").strip() or LOCAL_IMAGE
        with _namespace(kubeconfig) as name:
            if image == LOCAL_IMAGE:  # a cluster.sh cluster on this machine (another folder, ports)
                yield K8sCluster(kubeconfig=kubeconfig, namespace=name, image=image,
                                 python=sys.executable, local=False,
                                 host_paths=python_host_paths())
            else:
                yield K8sCluster(kubeconfig=kubeconfig, namespace=name, image=image,
                                 python="python3", local=False)
        return
    with service(CLUSTER_SH, "the test Kubernetes cluster", why_it_cannot_run(), ("start",),
                 ("stop",), START_TIMEOUT_S, STOP_TIMEOUT_S) as env:
        assert "KUBECONFIG" in env, f"cluster.sh start printed no KUBECONFIG: {env}"
        kubeconfig = Path(env["KUBECONFIG"])
        with _namespace(kubeconfig) as name:
            yield K8sCluster(kubeconfig=kubeconfig, namespace=name, image=LOCAL_IMAGE,
                             python=sys.executable, local=True, host_paths=python_host_paths())


@pytest.fixture
def on_k8s(k8s_cluster: K8sCluster, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A CLI whose `k8s` profile names the session's namespace, and a private copy of the demo;
    after the test, no object of its jobs is left in the namespace."""
    from cli_harness import copy_demo, make_cli
    from k8s_jobs import ENDED, wait_for_no_objects, write_profile

    cli = make_cli(tmp_path)
    write_profile(cli, k8s_cluster, tmp_path)
    yield cli, copy_demo(tmp_path)
    runs = tmp_path / "shared"
    job_ids = [p.name for p in runs.glob("*/runs/*") if p.is_dir()]
    for job_id in job_ids:
        if cli.status(job_id)["state"] not in ENDED:
            cli.run("cancel", job_id)
    left = {job_id: wait_for_no_objects(k8s_cluster, job_id) for job_id in job_ids}
    assert not any(left.values()), f"jobs left objects behind: {left}"


SUPERVISOR_ACCOUNT = "fsdp-orch-supervisor"


@pytest.fixture
def supervisor_account(k8s_cluster: K8sCluster) -> str:
    """A service account bound to exactly the documented Role, once per namespace."""
    import yaml
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from fsdp_orch.backends.kubernetes.doctor import role_manifest

    api = k8s_cluster.api_client()
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    ns = k8s_cluster.namespace
    try:
        core.create_namespaced_service_account(ns, {"metadata": {"name": SUPERVISOR_ACCOUNT}})
    except ApiException as exc:
        if exc.status != 409:
            raise
        return SUPERVISOR_ACCOUNT
    user = f"system:serviceaccount:{ns}:{SUPERVISOR_ACCOUNT}"
    role, binding = yaml.safe_load_all(role_manifest(ns, user))
    for named in (role["metadata"], binding["metadata"], binding["roleRef"]):
        named["name"] = SUPERVISOR_ACCOUNT
    rbac.create_namespaced_role(ns, role)
    rbac.create_namespaced_role_binding(ns, binding)
    return SUPERVISOR_ACCOUNT
