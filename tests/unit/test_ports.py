"""The rendezvous port a supervisor picks (``backends.ports``): free now, and below the kernel's
ephemeral range, where another process's outgoing connection could take it before the store binds
it (a warm-standby attempt failed with EADDRINUSE on such a port in a clean-clone run)."""

from __future__ import annotations

import random
import socket

from fsdp_orch.backends.ports import free_port
from fsdp_orch.launch.plan import RDZV_PORT_RANGE


def ephemeral_range() -> tuple[int, int]:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = map(int, f.read().split())
    return low, high


def test_the_port_is_outside_the_ephemeral_range_and_can_be_bound() -> None:
    low, high = RDZV_PORT_RANGE
    assert high <= ephemeral_range()[0], "the rendezvous range overlaps the ephemeral ports"
    for seed in range(20):
        port = free_port(rng=random.Random(seed))
        assert low <= port < high
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_someone_listens_on_is_never_picked() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        picked = free_port(ports=(port, port + 1))  # the only candidate is taken
        assert picked != port
