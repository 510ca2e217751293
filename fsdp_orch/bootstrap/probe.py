"""When did this process's main thread last run Python bytecode?

A watcher thread asks the interpreter to run a tiny callback on the main thread
(``Py_AddPendingCall``); the interpreter runs pending calls between bytecodes, so the callback runs
at once while the main thread executes Python and not at all while it sits in one native call (a
collective, a sleep, a blocked read). The time of its last run tells "stuck in native code" apart
from "busy in Python" (a long evaluation loop). NVIDIA's nvidia-resiliency-ext uses the same idea
for its in-process progress watchdog.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable

_PendingCall = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class MainThreadProbe:
    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self.python_at = clock()
        self._pending = False
        self._callback = _PendingCall(self._ran)  # kept alive as long as the probe
        self._add = ctypes.pythonapi.Py_AddPendingCall
        self._add.argtypes = [_PendingCall, ctypes.c_void_p]
        self._add.restype = ctypes.c_int

    def _ran(self, _arg: object) -> int:
        self._pending = False
        self.python_at = self._clock()
        return 0

    def mark(self) -> None:
        """Called from Python on the main thread (e.g. the step hook): it is running Python now."""
        self.python_at = self._clock()

    def ask(self) -> None:
        """From the watcher thread: schedule one callback, unless the last one has not run yet."""
        if self._pending:
            return
        self._pending = True
        if self._add(self._callback, None) != 0:  # the interpreter's queue is full: try later
            self._pending = False
