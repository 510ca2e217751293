"""What the agent hooks into the rank's Python process itself: a call as soon as the main module
returns, and every thread's stack on ``kill -USR1``. Standard library only."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs milliseconds in every Python process of the job
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import IO


def call_when_main_returns(callback: Callable[[], None]) -> None:
    """``callback`` as soon as the main module returns: before the interpreter joins other threads
    and tears down process groups, which can take a while and is not a hang."""
    import threading

    try:
        threading._register_atexit(callback)  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):
        import atexit

        atexit.register(callback)


def register_stack_dump(attempt_dir: str | None, rank: int) -> IO[str] | None:
    """``kill -USR1`` writes every thread's stack to the attempt's stacks folder: the supervisor's
    fallback where py-spy cannot attach. Left alone if the script uses USR1. Returns the file the
    stacks go to (kept open for faulthandler), or None."""
    import signal

    if attempt_dir is None or signal.getsignal(signal.SIGUSR1) != signal.SIG_DFL:
        return None
    import faulthandler

    from fsdp_orch.observe.attempt_files import STACKS_DIR, faulthandler_dump_name

    try:
        folder = os.path.join(os.path.expanduser(attempt_dir), STACKS_DIR)
        os.makedirs(folder, 0o700, exist_ok=True)
        # 0600 whatever the umask: a rank runs under the user's (bootstrap.user_umask)
        stack_file = os.fdopen(os.open(os.path.join(folder, faulthandler_dump_name(rank)),
                                       os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w")
        faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    except (OSError, RuntimeError, ValueError):
        return None
    return stack_file
