"""``fsdp-orch metrics --serve [ADDR:]PORT``: the HTTP exporter. ``listen_address`` is pure; the
server is prometheus_client's own (``/metrics``, a thread per scrape)."""

from __future__ import annotations

from prometheus_client.exposition import start_http_server
from prometheus_client.registry import CollectorRegistry

DEFAULT_ADDRESS = "127.0.0.1"  # loopback unless told otherwise: the metrics name the user's jobs


def listen_address(text: str) -> tuple[str, int]:
    """``[ADDR:]PORT`` (``[::1]:9400`` for IPv6) as (address, port); ValueError saying what was
    expected."""
    address, sep, port = text.rpartition(":")
    if not sep:
        address = DEFAULT_ADDRESS
    elif address.startswith("[") and address.endswith("]"):
        address = address[1:-1]
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected [ADDR:]PORT with a port from 0 to 65535, got {text!r}")
    if sep and not address:
        raise ValueError(f"expected [ADDR:]PORT with an address before ':', got {text!r}")
    return address, int(port)


def serve(address: str, port: int, registry: CollectorRegistry) -> tuple[object, int]:
    """Start serving ``registry`` in a background thread; the server and the port it bound (port 0:
    one the kernel picks). OSError when the address cannot be bound."""
    server, _ = start_http_server(port, addr=address, registry=registry)
    return server, int(server.server_port)
