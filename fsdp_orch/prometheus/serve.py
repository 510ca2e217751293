"""``fsdp-orch metrics --serve [ADDR:]PORT``: the HTTP exporter, prometheus_client's own
(``/metrics``, a thread per scrape). Loopback is no boundary on a shared machine: every account on
it can connect. With ``--token-file``, a scrape must carry ``Authorization: Bearer <token>``
(Prometheus: ``authorization: {credentials_file: FILE}``), compared in constant time.
``listen_address`` and ``token_problem`` are pure."""

from __future__ import annotations

import hmac
import stat
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import make_server

from prometheus_client.exposition import (
    ThreadingWSGIServer,
    _get_best_family,
    _SilentHandler,
    make_wsgi_app,
)
from prometheus_client.registry import CollectorRegistry

DEFAULT_ADDRESS = "127.0.0.1"  # loopback unless told otherwise: the metrics name the user's jobs
MIN_TOKEN_CHARS = 16


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


def token_problem(text: str, mode: int) -> str | None:
    """Why a token file (its text, its ``st_mode``) cannot guard the exporter, or None. Pure."""
    if stat.S_IMODE(mode) & 0o077:
        return (f"it can be read by others (mode {stat.S_IMODE(mode):04o}): chmod 600 it, the "
                "token is a secret")
    token = text.strip()
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        return (f"expected one token of at least {MIN_TOKEN_CHARS} characters without spaces "
                "(openssl rand -hex 32 makes one)")
    return None


def guarded(app: Callable[..., Iterable[bytes]], token: str) -> Callable[..., Iterable[bytes]]:
    """``app`` answering only requests that carry ``Authorization: Bearer <token>``."""
    expected = f"Bearer {token}".encode()

    def check(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        if hmac.compare_digest(given, expected):
            return app(environ, start_response)
        start_response("401 Unauthorized", [("Content-Type", "text/plain"),
                                            ("WWW-Authenticate", 'Bearer realm="fsdp-orch"')])
        return [b"a bearer token is needed (fsdp-orch metrics --serve --token-file)\n"]

    return check


def serve(address: str, port: int, registry: CollectorRegistry,
          token: str | None = None) -> tuple[object, int]:
    """Start serving ``registry`` in a background thread; the server and the port it bound (port 0:
    one the kernel picks). OSError when the address cannot be bound."""

    class Server(ThreadingWSGIServer):
        """prometheus_client's server, with the address family of ``address``."""

    Server.address_family, address = _get_best_family(address, port)
    app = make_wsgi_app(registry)
    server = make_server(address, port, guarded(app, token) if token else app, Server,
                         handler_class=_SilentHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_port)


__all__ = ["DEFAULT_ADDRESS", "guarded", "listen_address", "serve", "token_problem"]
