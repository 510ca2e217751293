"""The user's umask for what the job's own program writes (its checkpoints, its outputs), while
fsdp-orch's processes keep 077 for their own files. Recorded at submit (``launch.umask``, else the
umask ``submit`` was run with), handed to the ranks as ``FSDP_ORCH_UMASK`` and set in each training
process: by the bootstrap in a rank of torchrun or accelerate (``LOCAL_RANK``), by the standby
keeper in each rank it forks, by the launch script before it runs a one-process launcher. What
fsdp-orch writes from inside a rank is created with explicit modes (0600). Standard library only."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

UMASK_ENV = "FSDP_ORCH_UMASK"
_OCTAL_DIGITS = frozenset("01234567")  # no ``re``: the CLI imports this module at every start
_remembered: int | None = None


def parse_umask(text: str) -> int | None:
    """``"022"``, ``"0027"``, ``"77"``: the mask; None for anything else (not octal, above 0777)."""
    text = text.strip()
    digits = text[1:] if len(text) == 4 and text[0] == "0" else text  # 0?[0-7]{1,3}
    return int(text, 8) if 1 <= len(digits) <= 3 and _OCTAL_DIGITS.issuperset(digits) else None


def umask_text(mask: int) -> str:
    """The mask as ``launch.umask`` and ``umask`` write it: ``0022``."""
    return f"{mask:04o}"


def remember_user_umask(mask: int) -> None:
    """The CLI's umask before it set its own 077: the user's, which ``submit`` records."""
    global _remembered
    _remembered = mask


def user_umask() -> int:
    """The user's umask: the one the CLI remembered, else this process's (the Python API's)."""
    if _remembered is not None:
        return _remembered
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def apply_user_umask(env: Mapping[str, str]) -> None:
    """Set the job's ``FSDP_ORCH_UMASK`` in this (training) process; nothing when unset or bad."""
    mask = parse_umask(env.get(UMASK_ENV, ""))
    if mask is not None:
        os.umask(mask)


__all__ = ["UMASK_ENV", "apply_user_umask", "parse_umask", "remember_user_umask", "umask_text",
           "user_umask"]
