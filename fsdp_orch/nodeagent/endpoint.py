"""Where the node agents reach the supervisor: ``agent.json`` in the attempt's folder, written by
the supervisor (0600) with the address and a token the agents must say first. The folder is the
user's alone (0700), so only the user's own processes read the token; an agent trusts the file only
when it is the user's and no one else can write it."""

from __future__ import annotations

import json
import os
import stat

ENDPOINT_FILE = "agent.json"


def endpoint_path(attempt_dir: str) -> str:
    return os.path.join(os.path.expanduser(attempt_dir), ENDPOINT_FILE)


def write_endpoint(attempt_dir: str, host: str, port: int, token: str) -> None:
    from fsdp_orch.places.private import write_private

    write_private(endpoint_path(attempt_dir),
                  json.dumps({"host": host, "port": port, "token": token}))


def read_endpoint(attempt_dir: str) -> tuple[str, int, str] | None:
    """(host, port, token), or None while there is none or it cannot be trusted."""
    path = endpoint_path(attempt_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.getuid() or st.st_mode & 0o022 or not stat.S_ISREG(st.st_mode):
            return None  # another account's, or writable by others: never trusted
        try:
            data = json.loads(f.read())
            return str(data["host"]), int(data["port"]), str(data["token"])
        except (ValueError, KeyError, TypeError):
            return None


__all__ = ["ENDPOINT_FILE", "endpoint_path", "read_endpoint", "write_endpoint"]
