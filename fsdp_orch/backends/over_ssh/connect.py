"""Connections to an SSH cluster's hosts, through fabric (the user's keys, agent and ~/.ssh/config).

Host keys are checked against the profile's ``known_hosts``: with ``host_key_policy: strict`` (the
default) an unknown or changed key refuses the connection; ``accept-new`` takes an unknown key
(never a changed one); ``warn`` logs and goes on. fabric's own default (add any key) is never used.

A connection refused or dropped on the way in is tried again (``backoff.SSH_CONNECT``); a host that
does not answer within the connect timeout is not: the caller takes it for lost.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from fsdp_orch.launch.plan_inputs import host_port
from fsdp_orch.vocab.backoff import SSH_CONNECT, Sleep, retrying
from fsdp_orch.vocab.errors import FsdpOrchError

T = TypeVar("T")


class HostUnreachable(FsdpOrchError):
    """A host did not answer within the profile's connect timeout. ``lost_host``: its
    ``address:port``, as lost hosts are named (the supervisor plans the next attempt without it)."""

    def __init__(self, message: str, lost_host: str | None = None):
        super().__init__(message)
        self.lost_host = lost_host


class HostRefused(HostUnreachable):
    """A host refused or dropped the connection on the way in (sshd restarting, or too many
    connections at once): worth another try."""


REFUSED = (errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED)


def refused(exc: OSError) -> bool:
    """Whether every address of the host refused or reset the connection (paramiko gathers the
    error of each address it tried in a NoValidConnectionsError, whose own errno is None)."""
    errors = getattr(exc, "errors", None) or {None: exc}
    return all(isinstance(error, OSError) and error.errno in REFUSED for error in errors.values())


class HostKeyRejected(FsdpOrchError):
    """A host's key is unknown (strict) or does not match known_hosts."""


def where(host: Any) -> str:
    return f"{host.user + '@' if host.user else ''}{host.address}:{host.port}"


def connect(host: Any, profile: Any, *, open_once: Callable[[Any, Any], Any] | None = None,
            sleep: Sleep = time.sleep) -> Any:
    """An open fabric Connection to ``host``, tried again while the host refuses it (``sleep``:
    between tries); HostUnreachable or HostKeyRejected naming it."""
    tries = retrying(SSH_CONNECT, sleep=sleep, transient=lambda e: isinstance(e, HostRefused))
    return tries(open_once or open_connection, host, profile)


def open_connection(host: Any, profile: Any) -> Any:
    """One try at ``connect``."""
    import fabric
    import paramiko

    kwargs: dict[str, Any] = {"allow_agent": True, "look_for_keys": True,
                              "banner_timeout": profile.connect_timeout,
                              "auth_timeout": profile.connect_timeout}
    if host.identity_file:
        kwargs["key_filename"] = os.path.expanduser(host.identity_file)
    conn = fabric.Connection(host.address, user=host.user, port=host.port,
                             connect_timeout=profile.connect_timeout, connect_kwargs=kwargs)
    known_hosts = os.path.expanduser(profile.known_hosts)
    if os.path.isfile(known_hosts):
        conn.client.load_host_keys(known_hosts)
    policy = {"strict": paramiko.RejectPolicy, "accept-new": paramiko.AutoAddPolicy,
              "warn": paramiko.WarningPolicy}[profile.host_key_policy]
    conn.client.set_missing_host_key_policy(policy())
    try:
        conn.open()
    except paramiko.BadHostKeyException:
        raise HostKeyRejected(
            f"host {where(host)}: its key does not match the one in {known_hosts}; refusing to "
            "connect (if the host was rebuilt, verify its new key and replace the line)") from None
    except paramiko.SSHException as exc:
        if "not found in known_hosts" in str(exc):
            raise HostKeyRejected(
                f"host {where(host)}: its key is not in {known_hosts} and host_key_policy is "
                f"strict; verify the key and add it (ssh-keyscan -p {host.port} {host.address}), "
                "or set host_key_policy: accept-new in the profile") from None
        if ("protocol banner" in str(exc)
                and isinstance(exc.__context__, (EOFError, ConnectionError))):
            # sshd closed the connection before it said hello (not a banner timeout: that is
            # silence)
            raise HostRefused(f"host {where(host)}: {exc}",
                              host_port(host.address, host.port)) from None
        raise HostUnreachable(f"host {where(host)}: {exc}") from None
    except TimeoutError:
        raise HostUnreachable(f"host {where(host)} did not answer within connect_timeout "
                              f"({profile.connect_timeout}s)",
                              host_port(host.address, host.port)) from None
    except OSError as exc:
        unreachable = HostRefused if refused(exc) else HostUnreachable
        raise unreachable(f"host {where(host)} is unreachable: {exc.strerror or exc}",
                          host_port(host.address, host.port)) from None
    return conn


def run_on(host: Any, profile: Any, command: str, timeout: float, warn: bool = True) -> Any:
    """``command`` on ``host`` over a connection of its own (fabric's Result; with ``warn``, a
    failed command is a Result too, not an exception); the connection errors of ``connect``."""
    conn = connect(host, profile)
    try:
        return conn.run(command, hide=True, warn=warn, in_stream=False, timeout=timeout)
    finally:
        conn.close()


def run_with_input(host: Any, profile: Any, command: str, data: bytes, timeout: float) -> str:
    """Run ``command`` on ``host`` with ``data`` as its standard input (an archive, or values that
    must travel only over the SSH channel); its standard output. FsdpOrchError when it fails."""
    conn = connect(host, profile)
    try:
        channel = conn.client.get_transport().open_session()
        channel.settimeout(timeout)
        channel.exec_command(command)
        channel.sendall(data)
        channel.shutdown_write()
        out = channel.makefile("rb").read().decode(errors="replace")
        errors = channel.makefile_stderr("rb").read().decode(errors="replace")
        code = channel.recv_exit_status()
    finally:
        conn.close()
    if code != 0:
        raise FsdpOrchError(
            f"host {where(host)}: `{command}` exited {code}: {errors.strip()[-500:]}")
    return out


def on_every_host(hosts: list[Any], action: Callable[[int, Any], T],
                  at_most: int | None = None) -> list[T]:
    """``action(index, host)`` on all hosts at once (``at_most`` at a time, when given); the
    results in host order, and the first error (in host order) raised after all have finished."""
    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=min(at_most or len(hosts), len(hosts))) as pool:
        futures = [pool.submit(action, i, host) for i, host in enumerate(hosts)]
        errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error
    return [f.result() for f in futures]
