"""A free TCP port for a rendezvous, picked where the supervisor runs."""

from __future__ import annotations

import random
import socket

from fsdp_orch.launch.plan import RDZV_PORT_RANGE

TRIES = 64


def free_port(host: str = "127.0.0.1", ports: tuple[int, int] = RDZV_PORT_RANGE,
              rng: random.Random | None = None) -> int:
    """A port free on ``host`` now, below the kernel's ephemeral range (32768 and up, by default):
    a port the kernel handed out (bind to port 0) is from that range, where any outgoing connection
    on the machine may take it as its local port before the rendezvous store binds it (seen:
    EADDRINUSE, a warm-standby attempt lost to another test's connection). Port 0's where none of
    ``TRIES`` is free."""
    pick = rng or random.Random()
    low, high = ports
    for _ in range(TRIES):
        port = pick.randrange(low, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
