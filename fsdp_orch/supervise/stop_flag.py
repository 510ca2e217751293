"""SIGTERM or SIGINT to the supervisor, kept as a flag its loop reads: treated as a cancel."""

from __future__ import annotations

import signal


class StopFlag:
    def __init__(self) -> None:
        self.set = False

    def install(self) -> None:
        def handler(signum: int, frame: object) -> None:
            self.set = True

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
