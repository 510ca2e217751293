"""Where the values of a job's references (``{from_env:}``, ``{from_file:}``) wait while a process
on this machine may need them again: ``$FSDP_ORCH_HOME/secrets/<job id>.<part>``, 0600 in a 0700
folder, never under a ``shared_dir``. ``env`` is for the supervisor that runs on this machine
(local, SSH hosts, TPU VM; one that ``status`` re-attaches reads it too), ``notify`` for the
notifier's headers. Each is removed once its reader is done: the supervisor when the job has ended,
the notifier when it has sent everything; ``forget`` removes what is left of a job (``cancel``).
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

from fsdp_orch.places.builtin import home
from fsdp_orch.places.private import make_private_dirs, untrusted, write_private

Part = Literal["env", "notify"]
PARTS: tuple[Part, ...] = ("env", "notify")


def secrets_dir() -> str:
    return str(home() / "secrets")


def secrets_path(job_id: str, part: Part) -> str:
    return os.path.join(secrets_dir(), f"{job_id}.{part}.json")


def keep(job_id: str, part: Part, values: dict[str, Any]) -> None:
    """Write ``values`` (JSON) for ``part``; nothing when there are none."""
    if not values:
        return
    make_private_dirs(secrets_dir())
    os.chmod(secrets_dir(), 0o700)  # an existing folder others could read would show the names
    write_private(secrets_path(job_id, part), json.dumps(values, sort_keys=True))


def read(job_id: str, part: Part) -> dict[str, Any]:
    """What ``keep`` wrote; {} when there is nothing, or when the file is not the caller's alone
    (then it is not trusted: a value planted by someone else must not reach the job)."""
    path = secrets_path(job_id, part)
    if untrusted(path, [secrets_dir(), str(home())]) is not None:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def forget(job_id: str, part: Part | None = None) -> None:
    """Remove ``part`` of the job's values, or all of them."""
    for name in (part,) if part else PARTS:
        try:
            os.unlink(secrets_path(job_id, name))
        except FileNotFoundError:
            pass


def held(job_id: str) -> list[str]:
    """The parts still kept for the job (``doctor``, tests)."""
    return [part for part in PARTS if os.path.exists(secrets_path(job_id, part))]


__all__ = ["PARTS", "Part", "forget", "held", "keep", "read", "secrets_dir", "secrets_path"]
