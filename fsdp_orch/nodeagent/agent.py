"""One node's agent: reads its ranks' heartbeats (node-local), sends the supervisor one summary line
a second (sooner when a rank starts, saves or ends), and carries out the supervisor's orders for its
own ranks: their stacks, their end. asyncio, so that the scale bench runs hundreds in one
process."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable
from typing import Any

from fsdp_orch.nodeagent.handshake import agent_proof, nonce, proven, supervisor_proof
from fsdp_orch.nodeagent.node_logs import NodeLogs
from fsdp_orch.nodeagent.summary import (
    alive_between_steps,
    changed_beats,
    compact,
    state_changed,
    summary_line,
    with_process_states,
)
from fsdp_orch.observe.process_state import ProcessStates

SUMMARY_EVERY_S = 1.0  # a line at least this often: the node's liveness
LOOK_EVERY_S = 0.25  # how often the ranks' files are read
RECONNECT_EVERY_S = 0.5
HANDSHAKE_S = 5.0  # the supervisor's challenge and its proof each come at once, or it is not one
LAST_LINES_S = 5.0  # at its end, how long the agent waits for the launcher's, for its last lines

Beats = dict[int, dict[str, Any]]


class NodeAgent:
    """``read_beats``: this node's ranks now; ``endpoint``: (host, port, token) or None while there
    is none; ``launcher_alive``: False once the node's launcher ended (one last line, then the end);
    ``on_stop(grace)`` and ``on_stacks(pids, folder)`` run in a thread and return the reply's
    body."""

    def __init__(self, node: int, host: str, read_beats: Callable[[], Beats],
                 endpoint: Callable[[], tuple[str, int, str] | None], *,
                 launcher_alive: Callable[[], bool] = lambda: True,
                 on_stop: Callable[[float], dict[str, Any]] | None = None,
                 on_stacks: Callable[[dict[int, int], str], dict[str, Any]] | None = None,
                 clock: Callable[[], float] = time.time, every: float = SUMMARY_EVERY_S,
                 look_every: float = LOOK_EVERY_S, attempt: int = 0, note: str = "",
                 logs: NodeLogs | None = None, states: ProcessStates | None = None):
        """``note``: what the node's launch script has to tell the supervisor (its node-local
        folder was someone else's), said in the hello. ``logs``: the node's logs, kept on the node
        (``nodeagent.node_logs``): what they gain goes to the supervisor before each summary, and
        into the run folder every few seconds. ``states``: reads the process state of a rank whose
        heartbeat stands still (``observe.process_state``); None: not read (made-up pids)."""
        self.node, self.host, self.attempt = node, host, attempt
        self.note = note[:400]  # a hello stays one short line (nodeagent.server.HELLO_MAX_BYTES)
        self.read_beats, self.endpoint = read_beats, endpoint
        self.launcher_alive = launcher_alive
        self.on_stop, self.on_stacks = on_stop, on_stacks
        self.clock, self.every, self.look_every = clock, every, look_every
        self.ending = False  # set from outside (SIGTERM): send the last line and end
        self._answering: asyncio.Future[None] | None = None  # the reply to an order, being made
        self.lines_sent = 0
        self.logs = logs
        self.states = states

    async def run(self) -> None:
        try:
            while True:
                found = self.endpoint()
                if found is not None:
                    try:
                        if await self._connected(*found):
                            return
                    except (OSError, ConnectionError):
                        pass
                if self.ending or not self.launcher_alive():
                    return
                if self.logs is not None:
                    self.logs.copy()
                await asyncio.sleep(RECONNECT_EVERY_S)
        finally:
            if self.logs is not None:
                # the launcher's own last lines (a SIGTERM it was sent with this agent) come after
                deadline = self.clock() + LAST_LINES_S
                while self.launcher_alive() and self.clock() < deadline:
                    await asyncio.sleep(0.1)
                self.logs.copy(final=True)  # the whole of each log, in the run folder

    async def _connected(self, host: str, port: int, token: str) -> bool:
        reader, writer = await asyncio.open_connection(host, port, limit=4 << 20)
        if not await self._known(reader, writer, token):
            writer.close()  # not the supervisor: nothing sent, nothing obeyed; try again later
            return False
        listening = asyncio.ensure_future(self._listen(reader, writer))
        try:
            return await self._stream(writer, listening)
        finally:
            listening.cancel()
            writer.close()

    async def _known(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     token: str) -> bool:
        """The handshake (nodeagent.handshake): this agent proves it holds the token, and the
        listener must prove it too before anything else is sent or obeyed. The token itself never
        crosses the connection."""
        try:
            challenge = json.loads(await asyncio.wait_for(reader.readline(), HANDSHAKE_S))
            if not isinstance(challenge, dict) or not isinstance(challenge.get("challenge"), str):
                return False
            mine = nonce()
            hello = {"node": self.node, "host": self.host, "nonce": mine,
                     "proof": agent_proof(token, challenge["challenge"], mine),
                     **({"note": self.note} if self.note else {})}
            writer.write((json.dumps(hello) + "\n").encode())
            answer = json.loads(await asyncio.wait_for(reader.readline(), HANDSHAKE_S))
        except (asyncio.TimeoutError, ValueError, RecursionError):
            return False
        return isinstance(answer, dict) and proven(
            supervisor_proof(token, challenge["challenge"], mine), answer.get("proof"))

    async def _stream(self, writer: asyncio.StreamWriter, listening: asyncio.Future[None]) -> bool:
        sent: Beats = {}  # a new connection: every rank again
        last = 0.0
        while not listening.done():  # the supervisor hung up: connect again
            ending = self.ending or not self.launcher_alive()
            beats = self.read_beats()
            now = self.clock()
            current = with_process_states(
                {rank: compact(beat, now) for rank, beat in beats.items()}, self.states, now)
            if self.logs is not None:
                for name, at, data in self.logs.new_text():
                    writer.write((json.dumps({"log": name, "at": at,
                                              "data": base64.b64encode(data).decode()},
                                             separators=(",", ":")) + "\n").encode())
                self.logs.copy(final=ending)
            if (ending or now - last >= self.every or state_changed(current, sent)
                    or alive_between_steps(current, sent, now)):
                line = summary_line(self.node, self.host, now, changed_beats(current, sent),
                                    final=ending, attempt=self.attempt)
                writer.write(line.encode() + b"\n")
                await writer.drain()
                sent, last = current, now
                self.lines_sent += 1
            if ending:
                if self._answering is not None:
                    # the reply to the order that ended us goes out first
                    await asyncio.wait([self._answering], timeout=2.0)
                return True
            await asyncio.sleep(self.look_every)
        return False

    async def _listen(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                line = await reader.readline()
            except (OSError, ValueError):
                # reset, or a line past the limit: the supervisor went away
                return  # quietly: the agent's stderr is the node's console log, which is classified
            if not line:
                return
            try:
                order = json.loads(line)
                if order.get("stop") and self.on_stop is not None:
                    work = loop.run_in_executor(None, self.on_stop, float(order.get("grace", 5.0)))
                    key = "stopped"
                elif order.get("stacks") and self.on_stacks is not None:
                    pids = {int(r): int(p) for r, p in order["pids"].items()}
                    work = loop.run_in_executor(None, self.on_stacks, pids, str(order["folder"]))
                    key = "stacks_done"
                else:
                    continue
                self._answering = asyncio.ensure_future(
                    self._answer(work, key, order["id"], writer))
                await asyncio.shield(self._answering)
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            except Exception:  # noqa: BLE001 - an order that failed (py-spy, a vanished process):
                continue  # no answer

    @staticmethod
    async def _answer(work: asyncio.Future[dict[str, Any]], key: str, order: Any,
                      writer: asyncio.StreamWriter) -> None:
        try:
            body = await work
            writer.write((json.dumps({key: order, **body}, separators=(",", ":")) + "\n").encode())
            await writer.drain()
        except Exception:  # noqa: BLE001 - a failed order or a closed connection:
            return  # no answer, no noise


__all__ = ["LOOK_EVERY_S", "NodeAgent", "SUMMARY_EVERY_S"]
