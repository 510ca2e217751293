"""The supervisor's end of the node channel: a TCP server (asyncio streams, JSON lines, in a thread
of its own) that keeps the latest summary of every node, says which node went silent, and sends the
agents their orders (stop, stacks). Its work per second grows with the number of nodes: one line
per node per tick, whatever the number of ranks on it."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fsdp_orch.nodeagent.handshake import agent_proof, nonce, proven, supervisor_proof
from fsdp_orch.nodeagent.log_backlog import LogBacklog, unseen
from fsdp_orch.nodeagent.summary import parse_summary
from fsdp_orch.observe.heartbeats import Heartbeat

# An agent says something every second; this long without a word: lost (the job's
# watch.node_timeout, this by default: see its comment in jobspec/schema.py)
NODE_TIMEOUT_S = 30.0
MAX_LINE = 4 << 20
# The names of the logs a node's agent sends (nodeagent.node_logs); what they gained waits in a
# LogBacklog (nodeagent.log_backlog) for the supervisor's next look.
LOG_NAME = re.compile(r"console-node-\d+\.log|node-\d+/[\w.-]+/attempt_\d+/\d+/std(?:out|err)\.log")
# A stranger must not cost the supervisor memory or time: a connection says the token within
# HELLO_WITHIN_S and its first HELLO_MAX_BYTES (an agent's hello is one short line, sent at once),
# and at most MAX_STRANGERS connections wait for theirs (the oldest is closed for a newer one, so
# an agent that connects during a flood still gets in).
HELLO_WITHIN_S = 5.0
HELLO_MAX_BYTES = 1024
MAX_STRANGERS = 64
# asyncio accepts up to ``backlog`` connections at each readiness of the listening socket, each a
# descriptor before any of our code runs: a burst of thousands ran the supervisor out of them. A
# small backlog bounds what one turn of the loop takes; the kernel keeps the rest waiting.
ACCEPT_BACKLOG = 128


@dataclass
class NodeState:
    node: int
    host: str
    seen: float  # the server's clock at its last line
    connected: bool = True
    final: bool = False
    note: str = ""  # what its launch script said in the hello (its node-local folder was taken)


class SummaryServer:
    def __init__(self, token: str, host: str = "127.0.0.1", port: int = 0,
                 clock: Callable[[], float] = time.monotonic, node_timeout: float = NODE_TIMEOUT_S):
        self.token, self.host, self.port = token, host, port
        self.clock = clock
        self.node_timeout = node_timeout
        self._lock = threading.Lock()
        self._beats: dict[int, Heartbeat] = {}
        self._node_of: dict[int, int] = {}  # rank -> the node whose agent reported it
        self._unsorted = False  # ranks appeared since heartbeats() last sorted them
        self._nodes: dict[int, NodeState] = {}
        self._writers: dict[int, asyncio.Transport] = {}
        self._replies: dict[int, dict[int, Any]] = {}  # order id: node -> its reply
        self._orders = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._ready = threading.Event()
        self.lines = 0  # summaries taken, for the bench
        # what the nodes' logs gained (nodeagent.node_logs), for log_chunks; bytes had, by log
        self._logs = LogBacklog()
        self._log_had: dict[tuple[int, str], int] = {}
        self._strangers: dict[_AgentConnection, None] = {}  # awaiting their hello, oldest first
        # connections closed before they said the token, by why (read by refused_connections)
        self.refused: dict[str, int] = {"no token": 0, "too slow": 0, "too long": 0, "crowded": 0}

    # --- running ----------------------------------------------------------------------------

    def start(self) -> int:
        """Listen (in a daemon thread) and return the port."""
        threading.Thread(target=self._run, name="fsdp-orch-node-channel", daemon=True).start()
        self._ready.wait(10)
        if self._server is None:
            raise OSError(f"the node channel could not listen on {self.host}:{self.port}")
        return self.port

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._server = loop.run_until_complete(loop.create_server(
                lambda: _AgentConnection(self), self.host, self.port, backlog=ACCEPT_BACKLOG))
            self.port = self._server.sockets[0].getsockname()[1]
        except OSError:
            self._server = None
            self._ready.set()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            # the connections' sockets close on the loop's next turns; then the loop itself, so
            # that a supervisor that runs hundreds of attempts keeps no thread or socket of theirs
            loop.run_until_complete(asyncio.sleep(0.05))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def close(self) -> None:
        """Stop listening, close every connection and end the channel's thread."""
        loop, server = self._loop, self._server
        if loop is None or server is None or loop.is_closed():
            return

        def shut() -> None:
            server.close()
            for transport in self._writers.values():
                transport.close()
            for stranger in list(self._strangers):
                if stranger.transport is not None:
                    stranger.transport.close()
            loop.stop()
        try:
            loop.call_soon_threadsafe(shut)
        except RuntimeError:
            pass  # closed meanwhile

    def _hello(self, line: bytes, transport: asyncio.Transport, challenge: str) -> int | None:
        """The node of a connection whose first line proves it holds this attempt's token (an HMAC
        of ``challenge``, nodeagent.handshake), answered with the supervisor's own proof; None: a
        stranger."""
        hello = json.loads(line)
        if not isinstance(hello, dict) or not isinstance(hello.get("nonce"), str) or not proven(
                agent_proof(self.token, challenge, hello["nonce"]), hello.get("proof")):
            return None
        node, host = int(hello["node"]), str(hello.get("host", ""))
        transport.write(json.dumps(
            {"proof": supervisor_proof(self.token, challenge, hello["nonce"])}).encode() + b"\n")
        with self._lock:
            self._nodes[node] = NodeState(node, host, self.clock(), note=str(hello.get("note", "")))
            self._writers[node] = transport
        return node

    def _stranger(self, conn: _AgentConnection) -> None:
        """A new connection, not yet a node's: the oldest waiting one goes when too many wait."""
        if len(self._strangers) >= MAX_STRANGERS:
            oldest = next(iter(self._strangers))
            oldest.refuse("crowded")
        self._strangers[conn] = None

    def _refuse(self, conn: _AgentConnection, why: str) -> None:
        self._strangers.pop(conn, None)
        with self._lock:
            self.refused[why] += 1

    def node_notes(self) -> dict[int, str]:
        """What each node's launch script said in its agent's hello, by node rank."""
        with self._lock:
            return {n: state.note for n, state in self._nodes.items() if state.note}

    def refused_connections(self) -> dict[str, int]:
        """How many connections were closed before they said the token, by why; the data they
        sent is never kept."""
        with self._lock:
            return dict(self.refused)

    def _closed(self, node: int, transport: asyncio.Transport) -> None:
        with self._lock:
            state = self._nodes.get(node)
            if state is not None and self._writers.get(node) is transport:
                state.connected = False
                del self._writers[node]

    def _take(self, node: int, data: dict[str, Any]) -> None:
        now = self.clock()
        if "stacks_done" in data or "stopped" in data:
            order = int(data.get("stacks_done") or data.get("stopped") or 0)
            with self._lock:
                self._nodes[node].seen = now
                self._replies.setdefault(order, {})[node] = data
            return
        if "log" in data:
            self._take_log(node, data, now)
            return
        summary = parse_summary(data)
        with self._lock:
            state = self._nodes[node]
            state.seen, state.host = now, summary.host
            state.final = state.final or summary.final
            new = [rank for rank in summary.beats if rank not in self._node_of]
            if new:
                self._node_of.update((rank, node) for rank in new)
                self._unsorted = True
            self._beats.update(summary.beats)
            self.lines += 1

    def _take_log(self, node: int, data: dict[str, Any], now: float) -> None:
        """``{"log": NAME, "at": OFFSET, "data": BASE64}``: bytes a log of the node gained."""
        name, at = data["log"], data["at"]
        if (not isinstance(name, str) or not LOG_NAME.fullmatch(name) or type(at) is not int
                or at < 0 or not name.startswith((f"console-node-{node}.", f"node-{node}/"))):
            raise ValueError(f"log: expected one of node {node}'s log names and an offset")
        blob = base64.b64decode(data["data"], validate=True)
        with self._lock:
            self._nodes[node].seen = now
            key = (node, name)
            new, self._log_had[key] = unseen(self._log_had.get(key, 0), at, blob)
            if new:
                self._logs.add(name, new)

    # --- what the supervisor asks -----------------------------------------------------------

    def log_chunks(self) -> list[tuple[str, bytes]]:
        """What the nodes' logs gained since the last call (``nodeagent.node_logs``)."""
        with self._lock:
            return self._logs.take()

    def heartbeats(self) -> dict[int, Heartbeat]:
        """Every rank's latest heartbeat, by rank (sorted once after ranks appeared, not per
        line)."""
        with self._lock:
            if self._unsorted:
                self._beats = dict(sorted(self._beats.items()))
                self._unsorted = False
            return dict(self._beats)

    def nodes(self) -> dict[int, NodeState]:
        with self._lock:
            return {n: NodeState(**vars(s)) for n, s in self._nodes.items()}

    def lost_node(self) -> str | None:
        """The first node whose agent has said nothing for ``node_timeout`` (silent, or its
        connection closed and not opened again), before its launcher ended."""
        now = self.clock()
        with self._lock:
            for state in sorted(self._nodes.values(), key=lambda s: s.node):
                if state.final or now - state.seen <= self.node_timeout:
                    continue
                how = ("its connection closed" if not state.connected
                       else "its connection went silent")
                return (f"node {state.node} (host {state.host}) is lost: its agent has said "
                        f"nothing for {now - state.seen:.1f}s ({how}; node timeout "
                        f"{self.node_timeout:g}s, watch.node_timeout)")
        return None

    def lost_hosts(self) -> tuple[str, ...]:
        """The hosts (as their agents named them) of the nodes silent past the node timeout."""
        now = self.clock()
        with self._lock:
            return tuple(dict.fromkeys(
                s.host for s in sorted(self._nodes.values(), key=lambda s: s.node)
                if s.host and not s.final and now - s.seen > self.node_timeout))

    def silent_nodes(self, after: float) -> dict[int, float]:
        """The nodes whose agent has said nothing for more than ``after`` seconds (and has not sent
        its last summary), with how long."""
        now = self.clock()
        with self._lock:
            return {s.node: now - s.seen for s in self._nodes.values()
                    if not s.final and now - s.seen > after}

    def settle(self, timeout: float, sleep: Callable[[float], None] = time.sleep) -> None:
        """Wait (up to ``timeout``) for every connected agent's last summary, after the launchers
        ended."""
        deadline = self.clock() + timeout
        while self.clock() < deadline:
            with self._lock:
                if all(s.final or not s.connected for s in self._nodes.values()):
                    return
            sleep(0.05)

    def _order(self, message_of: Callable[[int], dict[str, Any] | None], wait: float,
               sleep: Callable[[float], None] = time.sleep,
               ended_is_done: bool = False) -> dict[int, Any]:
        """Send each connected node its message (None: none) and wait up to ``wait`` for the replies
        (``ended_is_done``: a node whose agent ended meanwhile counts as answered)."""
        order = next(self._orders)
        with self._lock:
            sent = {}
            for node, writer in self._writers.items():
                message = message_of(node)
                if message is not None:
                    sent[node] = writer
                    message = {**message, "id": order}
                    self._send(writer, message)
        deadline = self.clock() + wait
        while sent and self.clock() < deadline:
            with self._lock:
                answered = set(self._replies.get(order, {}))
                if ended_is_done:
                    answered |= {n for n in sent
                                 if self._nodes[n].final or not self._nodes[n].connected}
                if answered >= set(sent):
                    break
            sleep(0.05)
        with self._lock:
            return self._replies.pop(order, {})

    def _send(self, writer: asyncio.Transport, message: dict[str, Any]) -> None:
        line = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(writer.write, line)

    def stop_ranks(self, grace: float) -> dict[int, Any]:
        """Every agent ends its node's ranks (SIGTERM, SIGKILL after ``grace``), all at once."""
        return self._order(lambda node: {"stop": True, "grace": grace}, grace + 5,
                           ended_is_done=True)

    def capture_stacks(self, pids: dict[int, int], folder: str,
                       wait: float = 30.0) -> dict[int, Any]:
        """Each agent dumps the stacks of its own ranks among ``pids`` into ``folder``, in parallel;
        its reply by node: ``{"dumps": {rank: {"path", "source", "error"}}}``."""
        with self._lock:
            node_of = dict(self._node_of)

        def message(node: int) -> dict[str, Any] | None:
            mine = {str(r): p for r, p in pids.items() if node_of.get(r) == node}
            return {"stacks": True, "pids": mine, "folder": folder} if mine else None
        return self._order(message, wait)


class _AgentConnection(asyncio.Protocol):
    """One agent's connection: lines split here, not through a stream reader (a coroutine switch per
    line costs more than the line's own decoding, at a thousand lines a second)."""

    def __init__(self, server: SummaryServer):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.node: int | None = None
        self.pending = b""
        self.hello_timer: asyncio.TimerHandle | None = None
        self.challenge = nonce()  # what this connection's agent proves it holds the token with

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(json.dumps({"challenge": self.challenge}).encode() + b"\n")
        self.hello_timer = asyncio.get_running_loop().call_later(HELLO_WITHIN_S, self.refuse,
                                                                 "too slow")
        self.server._stranger(self)

    def refuse(self, why: str) -> None:
        """Close a connection that has not said the token (``why`` counted, its data dropped)."""
        if self.node is None and self.transport is not None and not self.transport.is_closing():
            self.pending = b""
            self.server._refuse(self, why)
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if self.node is None and len(self.pending) + len(data) > HELLO_MAX_BYTES and (
                b"\n" not in data[:HELLO_MAX_BYTES - len(self.pending)]):
            self.refuse("too long")
            return
        *lines, self.pending = (self.pending + data).split(b"\n")
        try:
            for line in lines:
                if self.node is None:
                    self.node = self.server._hello(line, self.transport, self.challenge)
                    if self.node is None:
                        raise ValueError("not one of this attempt's agents")
                    self.server._strangers.pop(self, None)
                elif line:
                    self.server._take(self.node, json.loads(line))
        except (ValueError, KeyError, TypeError, RecursionError):
            # a stranger, or a line that is not ours (``[[[[...``, nested past the parser's
            # depth, too): the connection ends, counted
            self.refuse("no token")
            self.transport.close()
            return
        if len(self.pending) > MAX_LINE:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.hello_timer is not None:
            self.hello_timer.cancel()
        self.server._strangers.pop(self, None)
        if self.node is not None and self.transport is not None:
            self.server._closed(self.node, self.transport)


__all__ = ["NODE_TIMEOUT_S", "NodeState", "SummaryServer"]
