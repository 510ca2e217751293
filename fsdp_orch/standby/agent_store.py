"""torchrun's agent store, served by a node's keeper: a forked child of the keeper hosts the
attempt's TCPStore on ``MASTER_PORT`` before any rank starts."""

from __future__ import annotations

import os
import signal

STORE_TIMEOUT_S = 1800.0


def host_store(env: dict[str, str]) -> tuple[int, int] | str:
    """torchrun's agent store: a forked child of this keeper serves the attempt's TCPStore on
    ``MASTER_PORT`` before any rank starts, so no rank's first connection finds nothing listening
    and backs off (0.3 s measured here when a rank 0 hosting it was a few milliseconds late). The
    store ends when the keeper closes its lifeline (or ends). The child's pid and the lifeline, or
    why not."""
    from datetime import timedelta

    ready_r, ready_w = os.pipe()
    life_r, life_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            os.close(ready_r)
            os.close(life_w)
            try:
                import torch.distributed as dist

                from fsdp_orch.bootstrap.store_bind import bound_store

                address, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
                timeout = timedelta(seconds=STORE_TIMEOUT_S)
                store = (bound_store(dist.TCPStore, address, port, wait_for_workers=False,
                                     timeout=timeout)
                         or dist.TCPStore(address, port, is_master=True, wait_for_workers=False,
                                          timeout=timeout))
            except Exception as exc:  # noqa: BLE001 - told to the keeper, which falls back
                os.write(ready_w, b"0" + str(exc).encode()[:400])
            else:
                os.write(ready_w, b"1")
                os.close(ready_w)
                os.read(life_r, 1)  # end of file: the keeper is done, or gone
                del store
                code = 0
        finally:
            os._exit(code)
    os.close(ready_w)
    os.close(life_r)
    answer = os.read(ready_r, 512)
    os.close(ready_r)
    if answer[:1] == b"1":
        return pid, life_w
    os.close(life_w)
    os.waitpid(pid, 0)
    return answer[1:].decode(errors="replace") or "the store process ended"
