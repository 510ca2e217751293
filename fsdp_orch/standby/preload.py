"""What a standby keeper imports before any rank is forked from it (torch, and what FSDP2, DCP and
fsdp-orch's runtime pull in), at idle priority where asked, then frozen out of the collector."""

from __future__ import annotations

import gc
import os

# Imported by the keeper so a rank's start-up finds them loaded: what torch scripts import first.
PRELOAD = ("torch", "torch.distributed", "torch.distributed.fsdp", "torch.nn", "torch.optim",
           "torch.utils.data", "torch.distributed.checkpoint")
# Loaded when they can be: what FSDP2 and DCP pull in lazily in a rank's first steps (torch._dynamo
# alone measured 3.2 s of a warm demo rank's start-up under -X importtime), and fsdp-orch's runtime
# (0.9 s: pydantic and the job spec), none of which reads the environment when imported.
PRELOAD_IF_PRESENT = ("torch._dynamo", "torch.distributed.checkpoint._fsspec_filesystem",
                      "torch.distributed.checkpoint.state_dict", "fsdp_orch.runtime.job")


def preload(idle: bool) -> None:
    """Imports what a rank would, in a thread of its own, at idle priority when ``idle``
    (``SCHED_IDLE``, a policy a thread may always lower itself to and which its process's other
    threads do not share): a keeper prepared ahead (a SLURM keeper host's, or one a launcher starts
    where no keeper could fork it) imports while an attempt's ranks start up and train, and on a
    node with no core to spare its import would slow them. A keeper a launcher waits on imports at
    the normal priority. The ranks are forked from the main thread, at its priority. Then what was
    imported is frozen out of the collector (``gc.freeze``, Python's advice for a process that forks
    without exec): a forked rank's collections and its end no longer walk, and so copy, every page
    of it (measured: a forked child that has run a little torch and ends, 2.0-2.2 CPU-s without,
    0.45-0.53 with)."""
    import importlib
    import threading

    failed: list[BaseException] = []

    def work() -> None:
        try:
            if idle:
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except (AttributeError, OSError):
            pass  # not Linux: imported at the keeper's priority
        try:
            for name in PRELOAD:
                importlib.import_module(name)
            for name in PRELOAD_IF_PRESENT:
                try:
                    importlib.import_module(name)
                except ImportError:
                    pass
        except BaseException as exc:  # noqa: BLE001 - raised again on the main thread
            failed.append(exc)

    importer = threading.Thread(target=work, name="fsdp-orch-preload")
    importer.start()
    importer.join()
    if failed:
        raise failed[0]
    gc.collect()
    gc.freeze()
