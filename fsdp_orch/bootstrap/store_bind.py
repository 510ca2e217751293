"""torch's TCPStore server listens on every interface of its host (``0.0.0.0``/``::``), whatever
address its clients are told. The rendezvous store of a job whose rendezvous host is 127.0.0.1 was
reachable from the network, and no store asks who connects. Where that address is an IP literal,
the server here listens on it alone: a socket bound to it is handed to torch (``master_listen_fd``),
and torchrun's own store, made ``multi_tenant`` on the same port in the same process, is that one.
A host name is left to torch (it may resolve to another address here than on the other nodes:
Debian maps a host's own name to 127.0.1.1). Stdlib only, imported when a store is made."""

from __future__ import annotations

TYPE_CHECKING = False  # imported in every Python process of the job: nothing at import time
if TYPE_CHECKING:
    import socket
    from types import ModuleType
    from typing import Any

LISTEN_BACKLOG = 2048
_held: list[Any] = []  # the stores made here live as long as the process (torchrun's agent)


def listening_socket(host: str, port: int) -> socket.socket | None:
    """A socket listening on ``host`` alone when it is an IP literal and ``port`` can be had there;
    None otherwise (torch then listens as it would)."""
    import ipaddress
    import socket

    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((str(address), port))
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        return None
    return sock


def bound_store(store_class: Any, host: str, port: int, **options: Any) -> Any | None:
    """A TCPStore server on ``host``:``port`` (0: a free port) that listens on ``host`` alone (see
    the module), or None where it cannot: then the caller makes its store as before."""
    sock = listening_socket(host, port)
    if sock is None:
        return None
    port = sock.getsockname()[1]
    try:
        return store_class(host, port, is_master=True, master_listen_fd=sock.detach(), **options)
    except Exception:  # noqa: BLE001 - the caller makes torch's own store instead
        return None


def _held_bound(store_class: Any, host: str, port: int, **options: Any) -> None:
    """A bound server for the store torch is about to make on ``host``:``port`` (``multi_tenant``:
    torch's then shares it), kept for the life of the process."""
    store = bound_store(store_class, host, port, multi_tenant=True, **options)
    if store is not None:
        _held.append(store)


def bind_rendezvous_store(module: ModuleType) -> None:
    """torchrun's rendezvous store (``c10d_rendezvous_backend._create_tcp_store``): on the node
    that hosts it (``--rdzv-conf is_host=true``, as fsdp-orch's launch scripts say), made first,
    bound to the endpoint's address."""
    original = getattr(module, "_create_tcp_store", None)
    if original is None:
        return

    def _create_tcp_store(params: Any) -> Any:
        if params.get_as_bool("is_host"):
            host, port = module.parse_rendezvous_endpoint(params.endpoint,
                                                          default_port=module.DEFAULT_PORT)
            _held_bound(module.TCPStore, host, port, wait_for_workers=False)
        return original(params)

    patched: Any = module
    patched._create_tcp_store = _create_tcp_store


def bind_shared_store(module: ModuleType) -> None:
    """The store torchrun's node 0 serves its ranks (``_create_tcp_store_server``, a free port on
    the node's ``--local-addr``), bound to that address."""
    handler = getattr(module, "DynamicRendezvousHandler", None)
    original = getattr(handler, "_create_tcp_store_server", None)
    if handler is None or original is None:
        return

    def _create_tcp_store_server(self: Any, master_addr: str, master_port: int) -> Any:
        store = bound_store(module.dist.TCPStore, master_addr, master_port, multi_tenant=True)
        return store if store is not None else original(self, master_addr, master_port)

    handler._create_tcp_store_server = _create_tcp_store_server


def bind_env_store(module: ModuleType) -> None:
    """The store rank 0 of ``init_process_group`` hosts (``env://``, ``tcp://``) when no torchrun
    agent does: bound to ``MASTER_ADDR``."""
    original = getattr(module, "_create_c10d_store", None)
    if original is None:
        return

    def _create_c10d_store(hostname: str, port: int, rank: int, world_size: int, timeout: Any,
                           *args: Any, **kwargs: Any) -> Any:
        if rank == 0 and not module._torchelastic_use_agent_store():
            _held_bound(module.TCPStore, hostname, port, world_size=world_size, timeout=timeout,
                        wait_for_workers=False)
        return original(hostname, port, rank, world_size, timeout, *args, **kwargs)

    patched: Any = module
    patched._create_c10d_store = _create_c10d_store


def bind_static_store(module: ModuleType) -> None:
    """The store of torchrun's static rendezvous (what ``accelerate launch`` starts), on node 0,
    bound to its master address."""
    rendezvous = getattr(module, "StaticTCPRendezvous", None)
    original = getattr(rendezvous, "next_rendezvous", None)
    if rendezvous is None or original is None:
        return

    def next_rendezvous(self: Any) -> Any:
        if self.rank == 0 and not self._store:
            _held_bound(module.TCPStore, self.master_addr, self.master_port,
                        world_size=self.world_size, timeout=self.timeout, wait_for_workers=False)
        return original(self)

    rendezvous.next_rendezvous = next_rendezvous


# module: how its store is bound
HOOKS = {"torch.distributed.rendezvous": bind_env_store,
         "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend": bind_rendezvous_store,
         "torch.distributed.elastic.rendezvous.dynamic_rendezvous": bind_shared_store,
         "torch.distributed.elastic.rendezvous.static_tcp_rendezvous": bind_static_store}

__all__ = ["HOOKS", "bound_store", "listening_socket"]
