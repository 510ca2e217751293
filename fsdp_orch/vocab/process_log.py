"""How the long-lived processes (supervisor, node agent, keepers, notifier) write their own lines:
``logging``, set up once by each process's entry point (``setup``), the lines as ``print`` wrote
them: text alone, flushed per line, to the process's stdout or stderr as they are at that line
(where its launch points them: ``supervisor.log`` and ``notify/notifier.log`` in the run folder, a
keeper's ``attempt-N.log`` in the node's standby folder, the node's ``console.log``).

Library modules only ask for ``logging.getLogger(__name__)``. ``print`` stays where it is the
program's output: a command's, or a rank's own stderr."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Literal, TextIO

LINE = "%(message)s"  # the text alone, as print wrote it: tests and people grep these lines
# the package's loggers, and the module a process was started as (``python -m``: ``__main__``)
PROCESS_LOGGERS = ("fsdp_orch", "__main__")


if TYPE_CHECKING:
    _StreamHandler = logging.StreamHandler[TextIO]
else:  # subscripted at run time from Python 3.11 only
    _StreamHandler = logging.StreamHandler


class _Current(_StreamHandler):
    """Writes to ``sys.stdout`` or ``sys.stderr`` as it is at each line, as ``print`` does (a stream
    replaced or redirected later, a forked keeper's, still gets it); flushed per line."""

    def __init__(self, name: Literal["stdout", "stderr"]) -> None:
        super().__init__(getattr(sys, name))
        self.name_of_stream = name

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = getattr(sys, self.name_of_stream)  # under the handler's lock
        super().emit(record)


_ours: list[logging.Handler] = []


def setup(to: Literal["stdout", "stderr"] | TextIO = "stdout",
          level: int = logging.INFO) -> None:
    """The process's lines at ``level`` and above to ``to`` (a name: that stream as it is at each
    line), once: a second call replaces the first. Not passed on to the root logger: each line
    is written once, whatever else configures logging."""
    forget()
    handler: logging.Handler = _Current(to) if isinstance(to, str) else logging.StreamHandler(to)
    handler.setFormatter(logging.Formatter(LINE))
    _ours.append(handler)
    for name in PROCESS_LOGGERS:
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False


def forget() -> None:
    """Undo ``setup``: a keeper's forked rank runs the user's program (its ``__main__``) as python
    would, with logging as it finds it."""
    while _ours:
        handler = _ours.pop()
        for name in PROCESS_LOGGERS:
            logger = logging.getLogger(name)
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)
            logger.propagate = True


__all__ = ["LINE", "PROCESS_LOGGERS", "forget", "setup"]
