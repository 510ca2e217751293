"""The Kubernetes API as the kind uses it, through the official ``kubernetes`` client (imported here
only: ``status`` and the CLI's start never load it). Objects are created from the manifests the
templates rendered, all or none: what a failed create made is deleted again. Every refusal of the
API server becomes one line naming what was refused and why (``refusal``, pure)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdp_orch.launch.render import Artifact
from fsdp_orch.vocab.errors import FsdpOrchError, InputError

# Each call to the API server waits at most this long (connect, read), then is refused as "does
# not answer": a submit never hangs on a cluster that is away.
REQUEST_TIMEOUT_S = (5.0, 30.0)
# Set in the supervisor's own pod: connect with the pod's service account, not a kubeconfig.
IN_CLUSTER_ENV = "FSDP_ORCH_K8S_IN_CLUSTER"
MANIFEST_PREFIX = "k8s-"  # an attempt's manifests: k8s-job.yaml, k8s-service.yaml, k8s-jobset.yaml
JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
# What the kind creates, by manifest kind: (the resource as RBAC names it, its API group)
RESOURCES = {"Job": ("jobs", "batch"), "Service": ("services", ""),
             "JobSet": (JOBSET_PLURAL, JOBSET_GROUP), "Pod": ("pods", ""),
             "Secret": ("secrets", "")}


class ApiRefused(FsdpOrchError):
    """The API server refused a request, or did not answer: ``detail`` is the one line to show.
    ``users_error``: bad input of the user's (a 4xx: exit 2), else the cluster's (exit 1)."""

    def __init__(self, detail: str, users_error: bool, status: int | None = None):
        super().__init__(detail)
        self.detail = detail
        self.users_error = users_error
        self.status = status  # the HTTP status the server answered; None: no answer
        self.exit_code = 2 if users_error else 1


def refusal(status: int | None, body: str | None, verb: str, kind: str, name: str,
            namespace: str, server: str) -> ApiRefused:
    """The API server's answer to ``verb`` of ``kind`` ``name`` as one line (pure), carrying
    ``status``."""
    refused = _refusal(status, body, verb, kind, name, namespace, server)
    refused.status = status
    return refused


def _refusal(status: int | None, body: str | None, verb: str, kind: str, name: str,
             namespace: str, server: str) -> ApiRefused:
    """The line for each answer. 401: the
    credentials; 403: the verb and resource that are missing (RBAC) or the quota exceeded, in the
    server's own words; 404 of a namespace; 409: the object exists; 422: what is invalid."""
    message = _message(body)
    resource, group = RESOURCES.get(kind, (kind.lower() + "s", ""))
    what = f"{verb} {kind} {name} in namespace {namespace}"
    if status is None:
        return ApiRefused(f"the Kubernetes API server at {server} does not answer ({message}); "
                          "check the kubeconfig's server and that the cluster is up", True)
    if status == 401:
        return ApiRefused(f"the Kubernetes API server at {server} refused the credentials of the "
                          f"kubeconfig (401 Unauthorized) to {what}: log in again or fix the "
                          "kubeconfig's user", True)
    if status == 403:
        if "exceeded quota" in message:
            return ApiRefused(f"cannot {what}: quota exceeded: {message}", True)
        full = f"{resource}.{group}" if group else resource
        return ApiRefused(f"cannot {what}: forbidden (403): the account needs '{verb}' on "
                          f"'{full}' in namespace {namespace} (docs/kubernetes.md, the Role): "
                          f"{message}", True)
    if status == 404:
        return ApiRefused(f"cannot {what}: not found (404): {message} (does namespace "
                          f"{namespace} exist?)", True)
    if status == 409:
        return ApiRefused(f"cannot {what}: it already exists (409): {message}", True)
    if status == 422:
        return ApiRefused(f"cannot {what}: the API server found it invalid (422): {message}", True)
    return ApiRefused(f"cannot {what}: the API server answered {status}: {message}",
                      400 <= status < 500)


def _message(body: str | None) -> str:
    """The ``message`` of a Kubernetes Status body, else the body's first line."""
    if not body:
        return "no message"
    try:
        doc = json.loads(body)
    except ValueError:
        return body.strip().splitlines()[0][:300] if body.strip() else "no message"
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return str(doc["message"])[:500]
    return body.strip()[:300]


@dataclass
class Api:
    """A connection to one cluster's API server, in one namespace."""

    client: Any  # kubernetes.client.ApiClient
    namespace: str
    server: str

    @property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.client)

    @property
    def batch(self) -> Any:
        from kubernetes import client

        return client.BatchV1Api(self.client)

    @property
    def custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.client)

    def create(self, manifest: dict[str, Any], *, dry_run: bool = False) -> None:
        """Create one object (Job, Service, JobSet); ``dry_run``: the server checks it all
        (admission, quota, validation) and keeps nothing. ApiRefused when refused."""
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        extra: dict[str, Any] = {"_request_timeout": REQUEST_TIMEOUT_S}
        if dry_run:
            extra["dry_run"] = "All"
        with self.answer("create", kind, name):
            if kind == "Job":
                self.batch.create_namespaced_job(self.namespace, manifest, **extra)
            elif kind == "Service":
                self.core.create_namespaced_service(self.namespace, manifest, **extra)
            elif kind == "JobSet":
                self.custom.create_namespaced_custom_object(
                    JOBSET_GROUP, JOBSET_VERSION, self.namespace, JOBSET_PLURAL, manifest, **extra)
            elif kind == "Secret":
                self.core.create_namespaced_secret(self.namespace, manifest, **extra)
            elif kind == "Pod":
                self.core.create_namespaced_pod(self.namespace, manifest, **extra)
            else:
                raise FsdpOrchError(f"kubernetes: no way to create a {kind}")

    def delete(self, kind: str, name: str, grace_s: int = 5) -> bool:
        """Delete one object and what it owns (its pods) in the background; False: it was not
        there. ApiRefused when refused. ``grace_s``: the object's own (a pod's: how long its
        containers have between SIGTERM and SIGKILL; a Job's pods keep theirs)."""
        body = {"propagationPolicy": "Background", "gracePeriodSeconds": grace_s}
        answer = self.answer("delete", kind, name)
        with answer:
            self._delete(kind, name, body)
        return not answer.not_found

    def _delete(self, kind: str, name: str, body: dict[str, Any]) -> None:
        timeout = {"_request_timeout": REQUEST_TIMEOUT_S}
        if kind == "Job":
            self.batch.delete_namespaced_job(name, self.namespace, body=body, **timeout)
        elif kind == "Service":
            self.core.delete_namespaced_service(name, self.namespace, body=body, **timeout)
        elif kind == "JobSet":
            self.custom.delete_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, self.namespace, JOBSET_PLURAL, name, body=body,
                **timeout)
        elif kind == "Pod":
            self.core.delete_namespaced_pod(name, self.namespace, body=body, **timeout)
        elif kind == "Secret":
            self.core.delete_namespaced_secret(name, self.namespace, body=body, **timeout)

    def pods(self, selector: str) -> list[dict[str, Any]]:
        """The pods with these labels, each as the API's JSON (a plain dict)."""
        with self.answer("list", "Pod", selector):
            found = self.core.list_namespaced_pod(self.namespace, label_selector=selector,
                                                  _request_timeout=REQUEST_TIMEOUT_S)
        plain: list[dict[str, Any]] = self.client.sanitize_for_serialization(found.items)
        return plain

    def pod_log(self, name: str, lines: int) -> str:
        """The last ``lines`` of the pod's log; "" where the server has none to give."""
        try:
            with self.answer("get", "Pod", name):
                text: str = self.core.read_namespaced_pod_log(
                    name, self.namespace, tail_lines=lines, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiRefused:
            return ""
        return text

    def labelled(self, selector: str, jobsets: bool = False) -> list[tuple[str, str]]:
        """(kind, name) of every Job (or JobSet) and Service with these labels."""
        timeout = {"label_selector": selector, "_request_timeout": REQUEST_TIMEOUT_S}
        found: list[tuple[str, str]] = []
        with self.answer("list", "Job", selector):
            found += [("Job", j.metadata.name)
                      for j in self.batch.list_namespaced_job(self.namespace, **timeout).items]
        if jobsets:
            with self.answer("list", "JobSet", selector):
                listed = self.custom.list_namespaced_custom_object(
                    JOBSET_GROUP, JOBSET_VERSION, self.namespace, JOBSET_PLURAL, **timeout)
            found += [("JobSet", item["metadata"]["name"]) for item in listed.get("items", [])]
        with self.answer("list", "Service", selector):
            found += [("Service", s.metadata.name)
                      for s in self.core.list_namespaced_service(self.namespace, **timeout).items]
        return found

    def secret_exists(self, name: str) -> bool:
        """Whether the Secret is there (asked by name: the kind never lists a namespace's
        Secrets, and its Role grants no list of them)."""
        try:
            with self.answer("get", "Secret", name):
                self.core.read_namespaced_secret(name, self.namespace,
                                                 _request_timeout=REQUEST_TIMEOUT_S)
        except ApiRefused as refused:
            if refused.status == 404:
                return False
            raise
        return True

    def job_ended(self, name: str) -> str | None:
        """How a Job stands: None while it runs; "Complete" or "Failed: <reason>" once it ended
        (its conditions); "gone" where there is no such Job."""
        try:
            with self.answer("get", "Job", name):
                job = self.batch.read_namespaced_job(name, self.namespace,
                                                     _request_timeout=REQUEST_TIMEOUT_S)
        except ApiRefused as refused:
            if refused.status == 404:
                return "gone"
            raise
        for condition in (job.status and job.status.conditions) or []:
            if condition.status == "True" and condition.type in ("Complete", "Failed"):
                why = f": {condition.reason}" if condition.type == "Failed" else ""
                return f"{condition.type}{why}"
        return None

    def answer(self, verb: str, kind: str, name: str) -> _Answer:
        return _Answer(self, verb, kind, name)


class _Answer:
    """Turns the client's exceptions for one request into ApiRefused."""

    def __init__(self, api: Api, verb: str, kind: str, name: str):
        self.api, self.verb, self.kind, self.name = api, verb, kind, name
        self.not_found = False  # a delete of what was not there (no refusal)

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or isinstance(exc, ApiRefused):
            return False
        from kubernetes.client.rest import ApiException
        from urllib3.exceptions import HTTPError

        if isinstance(exc, ApiException):
            if exc.status == 404 and self.verb == "delete":
                self.not_found = True
                return True
            raise refusal(exc.status, exc.body or exc.reason, self.verb, self.kind, self.name,
                          self.api.namespace, self.api.server) from None
        if isinstance(exc, (HTTPError, OSError)):
            raise refusal(None, str(exc).splitlines()[0][:200], self.verb, self.kind, self.name,
                          self.api.namespace, self.api.server) from None
        return False


def connect(kubeconfig: str | None, context: str | None, namespace: str,
            profile_file: str | None = None) -> Api:
    """The API server the kubeconfig (``None``: $KUBECONFIG, else ~/.kube/config) names, in its
    ``context`` (None: the current one). InputError (exit 2) when there is no kubeconfig, or no
    such context; nothing is asked of the server yet. In the supervisor's own pod
    (``IN_CLUSTER_ENV``): the pod's service account, whatever the profile's kubeconfig says."""
    from kubernetes import config

    if os.environ.get(IN_CLUSTER_ENV):
        return _in_cluster(namespace)

    path = os.path.expanduser(kubeconfig or os.environ.get("KUBECONFIG", "") or "~/.kube/config")
    if not os.path.isfile(path):
        raise InputError(f"no kubeconfig at {path}: name one with the profile's kubeconfig, or "
                         "set KUBECONFIG", file=profile_file, field="kubeconfig")
    try:
        contexts, current = config.list_kube_config_contexts(config_file=path)
    except Exception as exc:  # noqa: BLE001 - any unreadable kubeconfig is the user's to fix
        raise InputError(f"cannot read kubeconfig {path}: {exc}", file=profile_file,
                         field="kubeconfig") from None
    names = [c["name"] for c in contexts or []]
    if context is not None and context not in names:
        raise InputError(f"kubeconfig {path} has no context {context!r}; it has "
                         f"{', '.join(names) or 'none'}", file=profile_file, field="context")
    if context is None and not current:
        raise InputError(f"kubeconfig {path} has no current context: name one with the "
                         "profile's context", file=profile_file, field="context")
    try:
        api_client = config.new_client_from_config(config_file=path, context=context)
    except Exception as exc:  # noqa: BLE001 - a context with a missing cluster or user
        raise InputError(f"kubeconfig {path}: context {context or current['name']!r} cannot be "
                         f"used: {exc}", file=profile_file, field="context") from None
    api_client.configuration.retries = 1
    return Api(api_client, namespace, str(api_client.configuration.host))


def _in_cluster(namespace: str) -> Api:
    """The API server as a pod reaches it: $KUBERNETES_SERVICE_HOST and _PORT, the service
    account's token and CA (refreshed by the client as the kubelet rotates them)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException as exc:
        raise FsdpOrchError(f"kubernetes: no service account in this pod: {exc}") from None
    api_client = client.ApiClient(configuration)
    api_client.configuration.retries = 1
    return Api(api_client, namespace, str(configuration.host))


def create_all(api: Api, manifests: Iterable[dict[str, Any]], *, dry_run: bool = False) -> None:
    """Create every object, in order, or none: on a refusal, what was created is deleted again and
    the refusal raised. ``dry_run``: each checked by the server, nothing kept."""
    made: list[tuple[str, str]] = []
    try:
        for manifest in manifests:
            api.create(manifest, dry_run=dry_run)
            if not dry_run:
                made.append((manifest["kind"], manifest["metadata"]["name"]))
    except BaseException:
        for kind, name in reversed(made):
            try:
                api.delete(kind, name)
            except FsdpOrchError:
                pass  # the refusal that ended the create is the one to show
        raise


def manifests_in(artifacts: Iterable[Artifact], name: str | None = None) -> list[dict[str, Any]]:
    """The objects of an attempt's rendered manifests (``k8s-*.yaml``: not accelerate's config),
    in order; with ``name``, those of that one file (the supervisor's Job)."""
    import yaml

    def wanted(file: str) -> bool:
        return file == name if name else file.startswith(MANIFEST_PREFIX) and file.endswith(".yaml")

    return [doc for a in artifacts if wanted(Path(a.path).name)
            for doc in yaml.safe_load_all(a.text) if doc]


__all__ = ["IN_CLUSTER_ENV", "Api", "ApiRefused", "connect", "create_all", "manifests_in",
           "refusal"]
