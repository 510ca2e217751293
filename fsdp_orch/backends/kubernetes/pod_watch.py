"""The pods of one attempt as the API server's watch reports them: one thread lists them once, then
follows every change (a watch, not a poll per pod), and starts over from a fresh list when the
watch ends or breaks. The supervisor reads the latest state of each pod by name, a plain dict as
the API's JSON has it; a pod deleted is kept, marked ``deleted``."""

from __future__ import annotations

import threading
from typing import Any

from fsdp_orch.backends.kubernetes.api import REQUEST_TIMEOUT_S, Api

WATCH_S = 30  # each watch request's server-side timeout, then it is made again
RETRY_S = 1.0  # after a watch broke (the API server away): the wait before listing again
DELETED = "deleted"  # the key a deleted pod's dict gets (True)


class PodWatch:
    def __init__(self, api: Api, selector: str):
        self.api = api
        self.selector = selector
        self._pods: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listed = threading.Event()
        self.error: str | None = None  # the last failure to list or watch, until the next success
        self._thread = threading.Thread(target=self._run, name="fsdp-orch-pod-watch", daemon=True)
        self._thread.start()

    def pods(self) -> dict[str, dict[str, Any]]:
        """Every pod seen, by name: its latest state."""
        with self._lock:
            return dict(self._pods)

    def wait_listed(self, timeout: float) -> bool:
        """Whether the first list came back within ``timeout`` seconds."""
        return self._listed.wait(timeout)

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
                self.error = None
            except Exception as exc:  # noqa: BLE001 - the API server away: list again later
                self.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                self._stop.wait(RETRY_S)

    def _follow(self) -> None:
        from kubernetes import watch

        core, namespace = self.api.core, self.api.namespace
        listed = core.list_namespaced_pod(namespace, label_selector=self.selector,
                                          _request_timeout=REQUEST_TIMEOUT_S)
        plain = self.api.client.sanitize_for_serialization
        with self._lock:
            seen = {pod.metadata.name: plain(pod) for pod in listed.items}
            # a pod gone while the watch was down: deleted
            for name, pod in self._pods.items():
                if name not in seen:
                    seen[name] = {**pod, DELETED: True}
            self._pods = seen
        self._listed.set()
        follower = watch.Watch()
        for event in follower.stream(core.list_namespaced_pod, namespace,
                                     label_selector=self.selector,
                                     resource_version=listed.metadata.resource_version,
                                     timeout_seconds=WATCH_S,
                                     _request_timeout=(REQUEST_TIMEOUT_S[0], WATCH_S + 10)):
            if self._stop.is_set():
                follower.stop()
                return
            if event["type"] == "ERROR":  # the resource version expired: list again
                follower.stop()
                return
            pod = plain(event["object"])
            name = str((pod.get("metadata") or {}).get("name") or "")
            with self._lock:
                self._pods[name] = {**pod, DELETED: True} if event["type"] == "DELETED" else pod
        # the watch timed out on the server: follow again from a fresh list


__all__ = ["DELETED", "PodWatch"]
