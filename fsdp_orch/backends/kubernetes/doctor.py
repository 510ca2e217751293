"""What ``fsdp-orch doctor --cluster`` checks on a Kubernetes cluster, one line each: the kubeconfig
and its context, that the API server answers, the namespace, every access the kind needs there
(asked of the server, one ``SelfSubjectAccessReview`` each), the Secrets the profile names and the
run volume's claim. The least access is written once (``REQUIRED_ACCESS``), and the Role that
grants it (``role_manifest``) is what docs/kubernetes.md shows. Judging the answers is pure; only
``kubernetes_checks`` talks to the server."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fsdp_orch.backends.kubernetes.api import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    Api,
    connect,
)
from fsdp_orch.backends.kubernetes.probe import probe_check
from fsdp_orch.backends.kubernetes.profile import KubernetesProfile
from fsdp_orch.observe.command import Runner
from fsdp_orch.vocab.checks import Check
from fsdp_orch.vocab.errors import InputError

Access = tuple[str, str, str]  # (verb, resource as RBAC names it, API group: "" the core group)


def _grant(resource: str, group: str, *verbs: str) -> tuple[Access, ...]:
    return tuple((verb, resource, group) for verb in verbs)


# What the kind does in the profile's namespace: each attempt's Job and Service made, watched and
# deleted; its pods watched, the log of one that failed read, those still running once their
# ranks were stopped deleted at once; the job's own Secret made, read by name and deleted; the
# profile's Secrets read (doctor); the run volume's claim read (doctor: is it Bound).
REQUIRED_ACCESS: tuple[Access, ...] = (
    *_grant("jobs", "batch", "create", "delete", "get", "list", "watch"),
    *_grant("services", "", "create", "delete", "get", "list"),
    *_grant("pods", "", "get", "list", "watch", "delete"),
    *_grant("pods/log", "", "get"),
    *_grant("secrets", "", "create", "delete", "get"),
    *_grant("persistentvolumeclaims", "", "get"),
)
JOBSET_ACCESS = _grant(JOBSET_PLURAL, JOBSET_GROUP, "create", "delete", "get", "list", "watch")
ROLE_NAME = "fsdp-orch"
ROLE_FIX = ("grant it with the Role and RoleBinding of docs/kubernetes.md (kubectl apply -f "
            "role.yaml), or ask the cluster's admins to")
# The API server's answer to each request doctor makes (connect, read): a cluster that is away
# takes one line and a few seconds, not a hang.
ASK_TIMEOUT_S = (3.0, 10.0)
ANSWERS = "API server answers"
_CONNECTION = re.compile(r"^(<[^>]*>|\w+\(host=[^)]*\)): ")  # how urllib3 names the connection


def needed_access(use_jobset: bool) -> tuple[Access, ...]:
    """Every access the kind needs, in ``REQUIRED_ACCESS``'s order, JobSets' last."""
    return REQUIRED_ACCESS + (JOBSET_ACCESS if use_jobset else ())


def resource_name(resource: str, group: str) -> str:
    """As kubectl and RBAC errors spell it: ``jobs.batch``, ``services``, ``pods/log``."""
    return f"{resource}.{group}" if group else resource


def _by_resource(access: Iterable[Access]) -> dict[tuple[str, str], list[str]]:
    """(resource, group) -> its verbs, both in the order given."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for verb, resource, group in access:
        grouped.setdefault((resource, group), []).append(verb)
    return grouped


def access_checks(allowed: Mapping[Access, bool], namespace: str) -> list[Check]:
    """One line per resource, from the server's answer for each access (pure): the verbs the
    account lacks, each named with its resource (``create jobs.batch``)."""
    checks = []
    for (resource, group), verbs in _by_resource(allowed).items():
        full = resource_name(resource, group)
        missing = [v for v in verbs if not allowed[(v, resource, group)]]
        name = f"access to {full}"
        if not missing:
            checks.append(Check(name, True, f"{', '.join(verbs)} in namespace {namespace}"))
            continue
        checks.append(Check(name, False, f"missing in namespace {namespace}: "
                            + ", ".join(f"{verb} {full}" for verb in missing), ROLE_FIX))
    return checks


def role_manifest(namespace: str, user: str = "YOUR-USER", use_jobset: bool = False) -> str:
    """The Role that grants exactly what the kind needs in ``namespace``, and a RoleBinding of it
    to ``user`` (a service account's user is ``system:serviceaccount:<namespace>:<name>``), as
    YAML for ``kubectl apply`` (pure; docs/kubernetes.md shows it, a test keeps them equal)."""
    def quoted(items: Iterable[str]) -> str:
        return json.dumps(list(items))  # a JSON list is a YAML flow sequence

    where = f"  namespace: {json.dumps(namespace)}"  # quoted: a label such as 123 is no number
    lines = ["apiVersion: rbac.authorization.k8s.io/v1", "kind: Role", "metadata:",
             f"  name: {ROLE_NAME}", where, "rules:"]
    for (resource, group), verbs in _by_resource(needed_access(use_jobset)).items():
        lines += [f"- apiGroups: {quoted([group])}", f"  resources: {quoted([resource])}",
                  f"  verbs: {quoted(verbs)}"]
    lines += ["---", "apiVersion: rbac.authorization.k8s.io/v1", "kind: RoleBinding", "metadata:",
              f"  name: {ROLE_NAME}", where, "roleRef:",
              "  apiGroup: rbac.authorization.k8s.io", "  kind: Role", f"  name: {ROLE_NAME}",
              "subjects:", "- apiGroup: rbac.authorization.k8s.io", "  kind: User",
              f"  name: {json.dumps(user)}"]
    return "\n".join(lines) + "\n"


def named_secrets(profile: KubernetesProfile) -> list[str]:
    """The Secrets the pods read: image_pull_secrets', then env_from_secrets', each once."""
    return list(dict.fromkeys([*profile.image_pull_secrets,
                               *(e.secret for e in profile.env_from_secrets)]))


def secret_checks(profile: KubernetesProfile,
                  keys_of: Mapping[str, set[str] | str | None]) -> list[Check]:
    """Whether each Secret the profile names is there (pure). ``keys_of``: each Secret's keys,
    None where it does not exist, or why it could not be read."""
    names = named_secrets(profile)
    if not names:
        return []
    where = f"namespace {profile.namespace}"
    problems = []
    for name in names:
        keys = keys_of[name]
        if keys is None:
            problems.append(f"Secret {name} does not exist in {where} ({_use_of(profile, name)})")
        elif isinstance(keys, str):
            problems.append(f"Secret {name} cannot be read: {keys}")
        else:
            problems += [f"Secret {name} has no key {e.key} (env_from_secrets {e.env})"
                         for e in profile.env_from_secrets
                         if e.secret == name and e.key not in keys]
    if problems:
        return [Check("Secrets the profile names", False, "; ".join(problems),
                      f"create them in {where} (kubectl create secret ... -n "
                      f"{profile.namespace}), or fix the profile's image_pull_secrets and "
                      "env_from_secrets")]
    return [Check("Secrets the profile names", True, f"{', '.join(names)} in {where}")]


def _use_of(profile: KubernetesProfile, name: str) -> str:
    uses = ["image_pull_secrets"] if name in profile.image_pull_secrets else []
    uses += [f"env_from_secrets {e.env}" for e in profile.env_from_secrets if e.secret == name]
    return ", ".join(uses)


def claim_check(claim_name: str, namespace: str, claim: Mapping[str, Any] | str | None) -> Check:
    """Whether the run volume's PersistentVolumeClaim is Bound (pure). ``claim``: the claim as
    the API's JSON, None where it does not exist, or why it could not be read."""
    name = f"run volume's claim {claim_name}"
    fix = (f"create the claim in namespace {namespace} (ReadWriteMany: every node's pod and "
           "the submitting machine mount it), or fix run_volume's persistent_volume_claim")
    if claim is None:
        return Check(name, False, f"no PersistentVolumeClaim {claim_name} in namespace "
                     f"{namespace}: the pods would never be scheduled", fix)
    if isinstance(claim, str):
        return Check(name, False, f"cannot read it: {claim}", fix)
    status = claim.get("status") or {}
    phase = status.get("phase") or "Pending"
    modes = ", ".join(status.get("accessModes") or (claim.get("spec") or {}).get("accessModes")
                      or []) or "no access modes"
    if phase != "Bound":
        return Check(name, False, f"{phase}, not Bound ({modes}): pods that mount it wait until "
                     "it is (a storage class that binds at the first pod, WaitForFirstConsumer, "
                     "keeps it Pending until then)", fix)
    size = (status.get("capacity") or {}).get("storage")
    return Check(name, True, f"Bound ({modes}{', ' + size if size else ''})")


def jobset_check(groups: Mapping[str, list[str]] | str) -> Check:
    """Whether the API server serves JobSets (pure). ``groups``: each API group it serves -> its
    versions, or why discovery failed."""
    name = f"JobSet API ({JOBSET_GROUP}/{JOBSET_VERSION})"
    fix = ("install the JobSet controller (https://jobset.sigs.k8s.io), or set use_jobset: "
           "false for an Indexed Job and a headless Service")
    if isinstance(groups, str):
        return Check(name, False, f"cannot list the API groups: {groups}", fix)
    if JOBSET_VERSION in groups.get(JOBSET_GROUP, []):
        return Check(name, True, "served (use_jobset)")
    served = ", ".join(groups.get(JOBSET_GROUP, [])) or "none"
    return Check(name, False, f"the API server does not serve it (versions of {JOBSET_GROUP}: "
                 f"{served}): use_jobset needs the JobSet controller", fix)


def kubernetes_checks(profile: KubernetesProfile, torch_version: str | None,
                      run: Runner) -> list[Check]:
    """Each line of ``doctor`` for a Kubernetes profile. The torch in the image is not checked
    here: it runs in the pods, not on this machine (``torch_version``, ``run``: unused)."""
    path = kubeconfig_path(profile.kubeconfig)
    try:
        api = connect(profile.kubeconfig, profile.context, profile.namespace)
    except InputError as exc:
        return [Check("kubeconfig", False, exc.detail,
                      "set the profile's kubeconfig: and context: (or KUBECONFIG) to a "
                      "kubeconfig of the cluster")]
    checks = [Check("kubeconfig", True, f"{path}, context {_context_name(path, profile.context)}")]
    answer = server_answer(api)
    checks.append(answer)
    if not answer.ok:
        return checks  # nothing else can be asked
    checks.append(namespace_check(api))
    allowed, why_not = _ask_access(api, needed_access(profile.use_jobset))
    if why_not is not None:
        checks.append(Check("access in namespace", False, f"cannot ask the API server: {why_not}",
                            ROLE_FIX))
    else:
        checks += access_checks(allowed, profile.namespace)
    if allowed.get(("create", "jobs", "batch")):
        pods, _ = _ask_access(api, [("create", "pods", "")])
        checks.append(probe_check(api, profile, bool(pods.get(("create", "pods", "")))))
    checks += secret_checks(profile, {n: _secret_keys(api, n) for n in named_secrets(profile)})
    run_volume = next(v for v in profile.volumes if v.name == profile.run_volume)
    claim = run_volume.persistent_volume_claim
    if claim is not None:
        checks.append(claim_check(claim, api.namespace, _claim(api, claim)))
    if profile.use_jobset:
        checks.append(jobset_check(_api_groups(api)))
    return checks


def kubeconfig_path(kubeconfig: str | None) -> str:
    """The kubeconfig file ``api.connect`` reads: the profile's, else $KUBECONFIG's, else
    ~/.kube/config."""
    return os.path.expanduser(kubeconfig or os.environ.get("KUBECONFIG", "") or "~/.kube/config")


def _context_name(path: str, context: str | None) -> str:
    if context is not None:
        return context
    from kubernetes import config

    _, current = config.list_kube_config_contexts(config_file=path)
    return f"{current['name']} (its current one)"


def server_answer(api: Api) -> Check:
    """The API server's version, asked with a short timeout."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        version = client.VersionApi(api.client).get_code(_request_timeout=ASK_TIMEOUT_S)
    except ApiException as exc:
        if exc.status == 401:
            return Check(ANSWERS, False, f"{api.server} refused the kubeconfig's credentials "
                         "(401 Unauthorized)", "log in again, or fix the kubeconfig's user")
        return Check(ANSWERS, True, f"{api.server} (its version not shown: {exc.status} "
                     f"{exc.reason})")
    except Exception as exc:  # noqa: BLE001 - refused, timed out, TLS: the server does not answer
        return Check(ANSWERS, False, f"{api.server} does not answer: {why_no_answer(exc)}",
                     "check the kubeconfig's server and that the cluster is up (and reachable "
                     "from this machine: VPN, proxy)")
    return Check(ANSWERS, True, f"{api.server}: Kubernetes {version.git_version}")


def why_no_answer(exc: BaseException) -> str:
    """One line from what the client raised when the server did not answer: urllib3's reason
    (its last text argument) without the ``HTTPSConnection(host=..., port=...): `` before it."""
    reason = getattr(exc, "reason", None) or exc
    said = [a for a in getattr(reason, "args", ()) if isinstance(a, str) and a.strip()]
    text = (said[-1] if said else str(reason)).strip()
    if not text:
        return type(reason).__name__
    return _CONNECTION.sub("", text.splitlines()[0])[:200]


def namespace_check(api: Api) -> Check:
    """Whether the namespace exists: read it, or (an account that may not read namespaces, as
    the Role grants none) create a Secret in it on a dry run, which the server refuses with 404
    in a namespace that is not there and keeps nothing of otherwise."""
    from kubernetes.client.rest import ApiException

    name = f"namespace {api.namespace}"
    fix = (f"create it (kubectl create namespace {api.namespace}) or set the profile's namespace: "
           "to one that exists")
    try:
        api.core.read_namespace(api.namespace, _request_timeout=ASK_TIMEOUT_S)
        return Check(name, True, "exists")
    except ApiException as exc:
        if exc.status == 404:
            return Check(name, False, "does not exist", fix)
        if exc.status != 403:
            return Check(name, False, f"cannot read it: {exc.status} {exc.reason}", fix)
    probe = {"apiVersion": "v1", "kind": "Secret",
             "metadata": {"generateName": "fsdp-orch-doctor-"}}
    try:
        api.core.create_namespaced_secret(api.namespace, probe, dry_run="All",
                                          _request_timeout=ASK_TIMEOUT_S)
        return Check(name, True, "exists (a dry-run create in it was accepted)")
    except ApiException as exc:
        if exc.status == 404:
            return Check(name, False, "does not exist", fix)
        return Check(name, False, "cannot tell whether it exists: the account may neither get "
                     f"it nor create secrets in it ({exc.status} {exc.reason})", ROLE_FIX)


def _ask_access(api: Api, needed: Iterable[Access]) -> tuple[dict[Access, bool], str | None]:
    """The server's answer for each access in the namespace (a SelfSubjectAccessReview, which
    every authenticated account may make), or why it could not be asked."""
    from kubernetes import client

    reviews = client.AuthorizationV1Api(api.client)
    allowed: dict[Access, bool] = {}
    for verb, resource, group in needed:
        main, _, sub = resource.partition("/")
        body = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                namespace=api.namespace, verb=verb, group=group, resource=main,
                subresource=sub or None)))
        try:
            review = reviews.create_self_subject_access_review(body,
                                                               _request_timeout=ASK_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - refused or away: one line says why
            return {}, _refused(exc)
        allowed[(verb, resource, group)] = bool(review.status and review.status.allowed)
    return allowed, None


def _secret_keys(api: Api, name: str) -> set[str] | str | None:
    found = _read(api, lambda: api.core.read_namespaced_secret(name, api.namespace,
                                                               _request_timeout=ASK_TIMEOUT_S))
    if found is None or isinstance(found, str):
        return found
    return set(found.data or {}) | set(found.string_data or {})


def _claim(api: Api, name: str) -> dict[str, Any] | str | None:
    found = _read(api, lambda: api.core.read_namespaced_persistent_volume_claim(
        name, api.namespace, _request_timeout=ASK_TIMEOUT_S))
    if found is None or isinstance(found, str):
        return found
    plain: dict[str, Any] = api.client.sanitize_for_serialization(found)
    return plain


def _read(api: Api, read: Callable[[], Any]) -> Any:
    """What ``read`` returns; None when it is not there (404); why, when refused or away."""
    from kubernetes.client.rest import ApiException

    try:
        return read()
    except ApiException as exc:
        if exc.status == 404:
            return None
        return _refused(exc)
    except Exception as exc:  # noqa: BLE001 - the server away mid-doctor
        return _refused(exc)


def _refused(exc: BaseException) -> str:
    from kubernetes.client.rest import ApiException

    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    return f"no answer ({why_no_answer(exc)})"


def _api_groups(api: Api) -> dict[str, list[str]] | str:
    from kubernetes import client

    try:
        found = client.ApisApi(api.client).get_api_versions(_request_timeout=ASK_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - refused or away: one line says why
        return _refused(exc)
    return {g.name: [v.version for v in g.versions or []] for g in found.groups or []}


__all__ = ["ANSWERS", "ASK_TIMEOUT_S", "Access", "JOBSET_ACCESS", "REQUIRED_ACCESS",
           "access_checks", "claim_check", "jobset_check", "kubernetes_checks", "named_secrets",
           "needed_access", "resource_name", "role_manifest", "secret_checks", "why_no_answer"]
