"""The node agent and the supervisor's node channel: summaries (pure), and a real agent talking to a
real server over loopback TCP: beats arrive, a stranger is refused, orders are carried out, a silent
node is named lost."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import pytest

from fsdp_orch.nodeagent.agent import NodeAgent
from fsdp_orch.nodeagent.beat_dir import (
    node_beat_dir,
    private_beat_dir,
    rank_beat_path,
    read_beat_files,
)
from fsdp_orch.nodeagent.endpoint import read_endpoint, write_endpoint
from fsdp_orch.nodeagent.server import SummaryServer
from fsdp_orch.nodeagent.summary import (
    alive_between_steps,
    changed_beats,
    compact,
    dump_from_wire,
    dump_to_wire,
    parse_summary,
    state_changed,
    summary_line,
)
from fsdp_orch.observe.heartbeats import Heartbeat
from fsdp_orch.observe.stack_parse import Frame, ThreadStack
from fsdp_orch.observe.stacks import StackDump


def beat(rank: int, step: int, state: str = "training", at: float = 100.0) -> dict:
    return json.loads(Heartbeat(rank=rank, attempt=0, step=step, loss=None, time=at, state=state,
                                pid=1000 + rank, progress_at=at, python_at=at, host="n1").to_json())


def test_only_changed_ranks_are_sent_and_a_state_change_is_worth_a_line_at_once():
    sent = {0: beat(0, 5), 1: beat(1, 5)}
    now = {0: beat(0, 5), 1: beat(1, 6)}
    assert changed_beats(now, sent) == [beat(1, 6)]
    assert not state_changed(now, sent)
    assert state_changed({**now, 1: beat(1, 6, "saving")}, sent)
    assert state_changed({**now, 2: beat(2, 0, "starting")}, sent)  # a rank appeared


def test_a_rank_whose_file_is_not_rewritten_is_sent_held_once_and_fresh_again_when_it_is():
    # The rank's watcher rewrites its file every 0.5 s unless the interpreter is held (a native call
    # that keeps the GIL); the line leaves the file's own time out, so the agent says since when.
    fresh = beat(0, 5, at=100.0)
    sent = {0: compact(fresh, now=100.7)}
    assert "held_since" not in sent[0]
    held = compact(fresh, now=100.8)
    assert held["held_since"] == 100.0 and state_changed({0: held}, sent)  # a line at once
    assert changed_beats({0: compact(fresh, now=140.0)}, {0: held}) == []  # once per silence
    again = compact(beat(0, 5, at=140.5), now=140.6)
    assert "held_since" not in again and state_changed({0: again}, {0: held})
    # done: no more writes
    assert "held_since" not in compact(beat(0, 30, "done", at=100.0), now=200.0)
    parsed = parse_summary(json.loads(summary_line(0, "n1", 100.8, [held])))
    assert parsed.beats[0].held_since == 100.0


def test_a_rank_alive_between_steps_is_worth_a_line_at_once_and_a_hung_or_stepping_rank_adds_none():
    # Rank 0 last stepped at 100.0 (progress_at); what it shows since goes out at the next look,
    # not with the next second's line: the hang window can be 2 s.
    between = {**beat(0, 5, at=100.0), "compute_at": 100.5}
    sent = {0: compact(between, now=100.6)}
    at = 101.3
    for shows in ({"compute_at": 101.0},  # its data loader workers load
                  {"io_at": 101.0},  # a save writes
                  {"python_at": 101.0}):  # an evaluation runs Python
        assert alive_between_steps({0: compact({**between, **shows}, now=at)}, sent, now=at), shows
    assert not alive_between_steps(sent, sent, now=at)  # nothing new: a hung rank adds no lines
    stepping = {0: compact({**beat(0, 6, at=101.0), "compute_at": 101.0}, now=at)}
    # steady training: with the second's line
    assert not alive_between_steps(stepping, sent, now=at)
    started = {0: compact({**between, "state": "starting", "python_at": 101.0}, now=at)}
    assert not alive_between_steps(started, sent, now=at)  # start-up: its window is startup_timeout
    assert not alive_between_steps({0: compact({**between, "python_at": 101.0}, now=at)},
                                   {}, now=at)  # new: state_changed


def test_a_summary_parses_back_and_names_a_wrong_field():
    line = summary_line(3, "n4", 123.5, [beat(24, 7), {"rank": "x"}], final=True)
    summary = parse_summary(json.loads(line))
    assert (summary.node, summary.host, summary.at, summary.final) == (3, "n4", 123.5, True)
    # the bad heartbeat is dropped
    assert list(summary.beats) == [24] and summary.beats[24].step == 7
    with pytest.raises(ValueError, match="node: expected a node rank"):
        parse_summary({"node": -1, "host": "h", "at": 1.0})
    with pytest.raises(ValueError, match="at: expected a unix time"):
        parse_summary({"node": 1, "host": "h", "at": "soon"})


def test_a_stack_dump_crosses_the_wire_whole():
    dump = StackDump(3, 77, (ThreadStack(77, "MainThread", True,
                                         (Frame("wait", "/x/dist.py", 12),
                                          Frame("train", "/u/train.py", None)), gil=True),),
                     "py-spy", Path("/r/stacks/rank-3.txt"), "")
    assert dump_from_wire(json.loads(json.dumps(dump_to_wire(dump)))) == dump


def test_ranks_write_to_the_node_folder_and_an_untrusted_root_is_refused(tmp_path):
    folder = node_beat_dir("job1", 2, 1, tmp=str(tmp_path))
    assert folder == f"{tmp_path}/fsdp-orch-{os.getuid()}/job1/attempt-2/node-1"
    path = rank_beat_path(folder, str(tmp_path / "run"), 2, 5)
    assert path == f"{folder}/rank-5.json" and os.stat(folder).st_mode & 0o777 == 0o700
    assert not (tmp_path / "run").exists()  # nothing in the run folder
    root = tmp_path / f"fsdp-orch-{os.getuid()}"
    os.chmod(root, 0o777)
    assert private_beat_dir(folder) is None and root.stat().st_mode & 0o777 == 0o700  # tightened
    if os.getuid() == 0:
        planted = tmp_path / "other" / "fsdp-orch-0"
        planted.mkdir(parents=True)
        os.chown(planted, 65534, 65534)
        problem = private_beat_dir(str(planted / "j" / "attempt-0" / "node-0"))
        assert problem is not None and "not a folder of this user's" in problem
        assert rank_beat_path(str(planted / "j" / "attempt-0" / "node-0"),
                              str(tmp_path), 0, 0) is None


def test_the_endpoint_file_is_private_and_one_others_can_write_is_not_trusted(tmp_path):
    write_endpoint(str(tmp_path), "10.0.0.1", 4242, "secret")
    assert read_endpoint(str(tmp_path)) == ("10.0.0.1", 4242, "secret")
    assert (tmp_path / "agent.json").stat().st_mode & 0o777 == 0o600
    os.chmod(tmp_path / "agent.json", 0o666)
    assert read_endpoint(str(tmp_path)) is None


def test_read_beat_files_skips_what_is_not_a_rank_file(tmp_path):
    (tmp_path / "rank-0.json").write_text(json.dumps(beat(0, 3)))
    (tmp_path / "rank-1.json").write_text("{half")
    (tmp_path / "rank-2.json").write_text(json.dumps(beat(7, 3)))  # names another rank
    (tmp_path / "notes.txt").write_text("x")
    assert list(read_beat_files(str(tmp_path))) == [0]


class Node:
    """One agent in a thread of its own, with ranks in memory."""

    def __init__(self, node: int, port: int, token: str, ranks: dict[int, dict],
                 every: float = 0.2):
        self.ranks = ranks
        self.orders: list[tuple] = []
        self.agent = NodeAgent(node, f"host{node}", lambda: dict(self.ranks),
                               lambda: ("127.0.0.1", port, token),
                               on_stop=self._stop, on_stacks=self._stacks, every=every,
                               look_every=0.05)
        self.loop = asyncio.new_event_loop()
        self.task: asyncio.Task | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.task = self.loop.create_task(self.agent.run())
        try:
            self.loop.run_until_complete(self.task)
        except asyncio.CancelledError:
            pass

    def _stop(self, grace: float) -> dict:
        self.orders.append(("stop", grace))
        self.ranks = {r: {**b, "state": "done"} for r, b in self.ranks.items()}
        return {"killed": []}

    def _stacks(self, pids: dict[int, int], folder: str) -> dict:
        self.orders.append(("stacks", pids, folder))
        dump = StackDump(next(iter(pids)), next(iter(pids.values())), (), "py-spy", None, "")
        return {"dumps": {str(dump.rank): dump_to_wire(dump)}}

    def kill(self) -> None:
        """As SIGKILL would: the connection drops, no last line."""
        self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(5)


def wait_for(what, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if what():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def server():
    srv = SummaryServer("tok", node_timeout=1.0)
    srv.start()
    yield srv
    srv.close()


def test_two_nodes_feed_one_view_and_a_stranger_is_refused(server):
    a = Node(0, server.port, "tok", {0: beat(0, 1), 1: beat(1, 1)})
    b = Node(1, server.port, "tok", {2: beat(2, 1), 3: beat(3, 1)})
    stranger = Node(2, server.port, "wrong", {9: beat(9, 1)})
    assert wait_for(lambda: sorted(server.heartbeats()) == [0, 1, 2, 3])
    b.ranks = {**b.ranks, 3: beat(3, 2)}
    assert wait_for(lambda: server.heartbeats()[3].step == 2)
    time.sleep(0.3)
    assert 9 not in server.heartbeats() and sorted(server.nodes()) == [0, 1]
    assert server.lost_node() is None
    for node in (a, b, stranger):
        node.kill()


def test_orders_reach_the_agent_that_holds_the_ranks(server, tmp_path):
    a = Node(0, server.port, "tok", {0: beat(0, 1)})
    b = Node(1, server.port, "tok", {1: beat(1, 1)})
    assert wait_for(lambda: sorted(server.heartbeats()) == [0, 1])
    replies = server.capture_stacks({1: 1001}, str(tmp_path))
    assert (list(replies) == [1] and b.orders == [("stacks", {1: 1001}, str(tmp_path))]
            and a.orders == [])
    assert dump_from_wire(replies[1]["dumps"]["1"]).pid == 1001
    started = time.monotonic()
    server.stop_ranks(grace=2.0)
    assert time.monotonic() - started < 2.0  # both answered at once, no waiting out the grace
    assert ("stop", 2.0) in a.orders and ("stop", 2.0) in b.orders
    assert wait_for(lambda: {b.state for b in server.heartbeats().values()} == {"done"})
    a.kill()
    b.kill()


def test_a_node_whose_agent_dies_is_named_lost_after_the_node_timeout(server):
    a = Node(0, server.port, "tok", {0: beat(0, 1)})
    b = Node(1, server.port, "tok", {1: beat(1, 1)})
    assert wait_for(lambda: sorted(server.heartbeats()) == [0, 1])
    b.kill()
    killed = time.monotonic()
    assert wait_for(lambda: server.lost_node() is not None, timeout=5)
    # not before the node timeout (1 s): a reconnect may come
    assert time.monotonic() - killed >= 0.8
    lost = server.lost_node()
    assert lost.startswith("node 1 (host host1) is lost") and "connection closed" in lost, lost
    a.kill()


def test_a_node_whose_agent_falls_silent_is_silent_before_it_is_lost(server):
    """What the supervisor's hang rule waits on: a node silent past the channel's beat (its ranks'
    heartbeats are stale), before the node timeout names it lost."""
    a = Node(0, server.port, "tok", {0: beat(0, 1)})
    b = Node(1, server.port, "tok", {1: beat(1, 1)})
    assert wait_for(lambda: sorted(server.heartbeats()) == [0, 1])
    time.sleep(0.5)
    assert server.silent_nodes(0.5) == {}  # both speak every 0.2 s
    b.kill()
    assert wait_for(lambda: 1 in server.silent_nodes(0.5), timeout=3)
    silent = server.silent_nodes(0.5)
    assert list(silent) == [1] and 0.5 < silent[1] < 1.5, silent
    # silent first; lost only past the node timeout
    assert server.lost_node() is None or silent[1] > 1.0
    assert wait_for(lambda: server.lost_node() is not None, timeout=5)
    a.kill()


def test_a_node_whose_launcher_ended_is_not_lost(server):
    ranks = {0: beat(0, 1)}
    ended = threading.Event()
    agent = NodeAgent(0, "h", lambda: ranks, lambda: ("127.0.0.1", server.port, "tok"),
                      launcher_alive=lambda: not ended.is_set(), every=0.2, look_every=0.05)
    thread = threading.Thread(target=lambda: asyncio.run(agent.run()), daemon=True)
    thread.start()
    assert wait_for(lambda: 0 in server.heartbeats())
    ranks = {0: beat(0, 9, "done")}
    ended.set()
    thread.join(5)
    assert not thread.is_alive()
    server.settle(5)  # what the supervisor does once the launchers ended
    # the last line carried the end
    assert server.nodes()[0].final and server.heartbeats()[0].state == "done"
    time.sleep(1.3)
    assert server.lost_node() is None


def test_an_order_that_fails_gets_no_answer_and_the_agent_goes_on(server, tmp_path, capfd):
    node = Node(0, server.port, "tok", {0: beat(0, 1)})
    node.agent.on_stacks = lambda pids, folder: (_ for _ in ()).throw(
        RuntimeError("py-spy vanished"))
    assert wait_for(lambda: 0 in server.heartbeats())
    assert server.capture_stacks({0: 1000}, str(tmp_path), wait=1.0) == {}
    node.ranks = {0: beat(0, 2)}
    assert wait_for(lambda: server.heartbeats()[0].step == 2)  # still streaming
    node.kill()
    assert "py-spy vanished" not in capfd.readouterr().err  # the node's console log stays clean


class Impostor:
    """A listener on the supervisor's port that is not the supervisor (it took a dead one's port):
    it plays the handshake as far as it can without the token, then gives orders."""

    def __init__(self, proof: str):
        self.proof = proof
        self.received = b""
        self.loop = asyncio.new_event_loop()
        self.port = 0
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait(5)

    def _run(self, ready: threading.Event) -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b'{"challenge": "0123456789abcdef"}\n')
            self.received += await reader.readline()
            writer.write(json.dumps({"proof": self.proof}).encode() + b"\n")
            writer.write(b'{"stop": 1, "grace": 1}\n{"stacks": 2, "pids": {"0": 1}, '
                         b'"folder": "/tmp"}\n')
            await writer.drain()
            try:
                while chunk := await asyncio.wait_for(reader.read(65536), 1.0):
                    self.received += chunk
            except (asyncio.TimeoutError, ConnectionError):
                pass
            writer.close()

        async def main() -> None:
            server = await asyncio.start_server(serve, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            await asyncio.sleep(30)
        self.loop.run_until_complete(main())


@pytest.mark.parametrize("proof", ["", "0" * 64, "guessed"])
def test_a_listener_that_is_not_the_supervisor_learns_no_token_and_is_never_obeyed(proof):
    token = "a-token-of-this-attempt-0123456789"
    impostor = Impostor(proof)
    agent = Node(0, impostor.port, token, {0: beat(0, 1)})
    assert wait_for(lambda: impostor.received, timeout=5)
    time.sleep(1.5)
    agent.kill()
    hello = json.loads(impostor.received.splitlines()[0])
    assert set(hello) == {"node", "host", "nonce", "proof"}, hello
    assert token not in impostor.received.decode(), "the token crossed the connection"
    assert b'"beats"' not in impostor.received, "heartbeats went to a listener that proved nothing"
    assert agent.orders == [], "an order of a listener that proved nothing was obeyed"


def test_the_supervisor_answers_a_hello_without_the_right_proof_with_nothing(server):
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
        reader = conn.makefile("rb")
        challenge = json.loads(reader.readline())["challenge"]
        assert len(challenge) == 32
        conn.sendall(json.dumps({"node": 0, "host": "x", "nonce": "n", "hello": "tok",
                                 "proof": "tok"}).encode() + b"\n")
        assert reader.readline() == b""  # closed, no proof of its own given
    assert wait_for(lambda: server.refused_connections()["no token"] == 1)
