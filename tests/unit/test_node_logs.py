"""A node's logs kept on the node (``nodeagent.node_logs``): what the agent sends the supervisor
(each log's new bytes, capped to its newest), what it copies into the run folder (every few seconds,
whole at the end), and what the supervisor's channel takes of it (``SummaryServer._take_log``)."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest

from fsdp_orch.nodeagent import node_logs
from fsdp_orch.nodeagent.node_logs import COPY_EVERY_S, NodeLogs
from fsdp_orch.nodeagent.server import NodeState, SummaryServer

RANK_FILE = "run-a0_x/attempt_0/0/stdout.log"


def node_folder(tmp_path: Path) -> tuple[Path, Path]:
    local, attempt = tmp_path / "local", tmp_path / "run" / "attempt-0"
    (local / "logs" / "run-a0_x" / "attempt_0" / "0").mkdir(parents=True)
    attempt.mkdir(parents=True)
    return local, attempt


def test_new_text_is_each_logs_gain_under_its_run_folder_name(tmp_path: Path) -> None:
    local, attempt = node_folder(tmp_path)
    logs = NodeLogs(1, local, attempt)
    (local / "console.log").write_bytes(b"[default0]:step=1\n")
    (local / "logs" / RANK_FILE).write_bytes(b"step=1\n")
    assert logs.new_text() == [("console-node-1.log", 0, b"[default0]:step=1\n"),
                               (f"node-1/{RANK_FILE}", 0, b"step=1\n")]
    assert logs.new_text() == []  # nothing new
    with open(local / "console.log", "ab") as f:
        f.write(b"[default0]:step=2\n")
    assert logs.new_text() == [("console-node-1.log", 18, b"[default0]:step=2\n")]


def test_a_log_that_gained_more_than_the_cap_sends_its_newest_bytes(tmp_path: Path,
                                                                    monkeypatch) -> None:
    monkeypatch.setattr(node_logs, "SEND_AT_MOST", 10)
    local, attempt = node_folder(tmp_path)
    (local / "console.log").write_bytes(b"0123456789Traceback\n")
    [(name, at, data)] = NodeLogs(0, local, attempt).new_text()
    assert (name, at, data) == ("console-node-0.log", 10, b"Traceback\n"[-10:])


def test_copies_are_batched_every_few_seconds_and_whole_at_the_end(tmp_path: Path) -> None:
    local, attempt = node_folder(tmp_path)
    now = [100.0]
    logs = NodeLogs(0, local, attempt, clock=lambda: now[0])
    console = local / "console.log"
    console.write_bytes(b"a\n")
    assert logs.copy() == 1 and (attempt / "console-node-0.log").read_bytes() == b"a\n"
    assert stat.S_IMODE((attempt / "console-node-0.log").stat().st_mode) == 0o600
    with open(console, "ab") as f:
        f.write(b"b\n")
    now[0] += COPY_EVERY_S / 2
    assert logs.copy() == 0  # too soon: the run folder is not touched
    assert (attempt / "console-node-0.log").read_bytes() == b"a\n"
    now[0] += COPY_EVERY_S
    (local / "logs" / RANK_FILE).write_bytes(b"x\n")
    assert logs.copy() == 1  # while it runs, the console alone (every rank's lines, tagged)
    assert not (attempt / "node-0" / RANK_FILE).exists()
    with open(console, "ab") as f:
        f.write(b"c\n")
    assert logs.copy(final=True) == 2  # at the end, the ranks' own files too
    assert (attempt / "console-node-0.log").read_bytes() == console.read_bytes() == b"a\nb\nc\n"
    assert (attempt / "node-0" / RANK_FILE).read_bytes() == b"x\n"


def test_copiers_that_take_turns_never_append_twice(tmp_path: Path) -> None:
    """An SSH host's report copies while the attempt runs; its node's wrapper (or the stop command)
    copies the rest at the end, a new process that knows nothing of the report's copies: each
    resumes at the run-folder copy's size, under the node folder's lock."""
    local, attempt = node_folder(tmp_path)
    console = local / "console.log"
    console.write_bytes(b"a\n")
    assert NodeLogs(0, local, attempt).copy() == 1  # the report, at its first look
    with open(console, "ab") as f:
        f.write(b"b\n")
    assert NodeLogs(0, local, attempt).copy(final=True) == 1  # the wrapper, a new process
    assert NodeLogs(0, local, attempt).copy(final=True) == 0  # the stop command after it
    assert (attempt / "console-node-0.log").read_bytes() == b"a\nb\n"
    assert stat.S_IMODE((local / node_logs.COPY_LOCK).stat().st_mode) == 0o600


def test_copy_at_end_finds_the_node_folder_its_script_made_in_place_of_a_taken_one(
        tmp_path: Path) -> None:
    moved = tmp_path / "fsdp-orch-0-abcdefgh"
    folder = moved / "j1" / "attempt-3" / "node-1"
    folder.mkdir(parents=True)
    (folder / "console.log").write_bytes(b"the ranks' lines\n")
    attempt = tmp_path / "run" / "attempt-3"
    (attempt / "node-1").mkdir(parents=True)
    (attempt / "node-1" / "node_tmp_moved").write_text(f"{moved}\n")
    assert node_logs.copy_at_end(str(attempt), "j1", 3, 1) == 1
    assert (attempt / "console-node-1.log").read_bytes() == b"the ranks' lines\n"
    assert node_logs.copy_at_end(str(attempt), "j1", 3, 0) == 0  # no folder for node 0: nothing


def channel_with_node(node: int) -> SummaryServer:
    server = SummaryServer("t")
    server._nodes[node] = NodeState(node, "n1", 0.0)
    return server


def log_line(name: str, at: int, data: bytes) -> dict:  # type: ignore[type-arg]
    return {"log": name, "at": at, "data": base64.b64encode(data).decode()}


def test_the_channel_keeps_what_a_node_sent_once_in_order() -> None:
    server = channel_with_node(1)
    server._take(1, log_line("console-node-1.log", 0, b"one\n"))
    server._take(1, log_line("console-node-1.log", 0, b"one\ntwo\n"))  # sent again, and more
    server._take(1, log_line(f"node-1/{RANK_FILE}", 0, b"x\n"))
    assert server.log_chunks() == [("console-node-1.log", b"one\n"),
                                   ("console-node-1.log", b"two\n"),
                                   (f"node-1/{RANK_FILE}", b"x\n")]
    assert server.log_chunks() == []


@pytest.mark.parametrize("name", ["console-node-0.log", "../events/x.jsonl", "node-1/a/b/c.log",
                                  "console-node-1.log\n"])
def test_the_channel_refuses_a_name_that_is_not_one_of_the_nodes_logs(name: str) -> None:
    server = channel_with_node(1)
    with pytest.raises(ValueError):
        server._take(1, log_line(name, 0, b"x"))
    assert server.log_chunks() == []
