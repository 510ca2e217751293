"""A node summary: what one node's relay tells the supervisor of its ranks in one JSON line. Pure.
The one format for rank heartbeats on every transport: the node agent's TCP channel (local, SLURM)
and an SSH host's report stream (SSH, TPU VM: ``backends.over_ssh.node_report``, which sends its
logs and its node's end beside it); ``parse_summary`` is the supervisor's one reader of them.

    {"node": N, "host": "...", "attempt": A, "at": UNIX_TIME, "beats": [<heartbeats that changed>],
     "final": bool}

``beats`` holds only the ranks whose heartbeat changed since the relay's last line (their heartbeat,
as ``observe.heartbeats`` lays it out, less ``time``, ``host`` and ``attempt``: the line's own, see
``compact``); ``at`` is the node's own liveness and each sent heartbeat's ``time``; ``final`` says
the node's launcher has ended and nothing more will come. The other lines of the agent's channel:

    (first, once per connection, the handshake of nodeagent.handshake: a challenge, the agent's
    hello with its proof, the supervisor's proof; the token never crosses)
                         {"stacks_done": ID, "dumps": {RANK: {"path", "source", "error"}}}
                         {"stopped": ID, "killed": [PID, ...]}
    supervisor -> agent  {"stop": ID, "grace": SECONDS}                  end this node's ranks
                         {"stacks": ID, "pids": {RANK: PID}, "folder": PATH}
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from fsdp_orch.observe.heartbeats import TIME_FIELDS, Heartbeat, heartbeat_from_dict, held_since
from fsdp_orch.observe.process_state import ProcessStates
from fsdp_orch.vocab.states import HeartbeatState

# What the node's line says once for all its ranks (``at``, ``host``, ``attempt``): left out of
# each.
_PER_NODE = ("time", "host", "attempt")


def compact(beat: dict[str, Any], now: float) -> dict[str, Any]:
    """A rank's heartbeat as the line carries it: without what the node says once, times to the
    millisecond. A rank hung in a native call then reads the same tick after tick, and is not sent.
    Its own write time goes, so ``held_since`` (read here, with the node's clock) says when a rank's
    file stopped being rewritten: once as it stops, once as it starts again."""
    out = {k: v for k, v in beat.items() if k not in _PER_NODE}
    held = held_since(beat, now)
    if held is not None:
        out["held_since"] = held
    for key in TIME_FIELDS:
        value = out.get(key)
        if isinstance(value, float):
            out[key] = round(value, 3)
    return out


def with_process_states(current: dict[int, dict[str, Any]], states: ProcessStates | None,
                        now: float) -> dict[int, dict[str, Any]]:
    """``current`` (compact heartbeats by rank), each held rank's (``held_since``: its file stands
    still) with its process's state and since when (``proc_state``, ``proc_state_since``) where it
    is frozen: stopped or in uninterruptible sleep (``observe.process_state``). Only held ranks are
    read: a rank that rewrites its file is not frozen. ``states``: None, nothing is read (a bench's
    made-up pids). Called at every look: the states' timing needs each."""
    if states is None:
        return current
    held = {rank: beat["pid"] for rank, beat in current.items()
            if "held_since" in beat and type(beat.get("pid")) is int and beat["pid"] > 0}
    frozen = states.look(sorted(set(held.values())), now)
    out = dict(current)
    for rank, pid in held.items():
        if pid in frozen:
            state, since = frozen[pid]
            out[rank] = {**current[rank], "proc_state": state,
                         "proc_state_since": round(since, 3)}
    return out


def changed_beats(current: dict[int, dict[str, Any]],
                  sent: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The heartbeats of ``current`` that differ from what was last ``sent``, by rank."""
    return [beat for rank, beat in sorted(current.items()) if sent.get(rank) != beat]


def summary_line(node: int, host: str, at: float, beats: list[dict[str, Any]], final: bool = False,
                 attempt: int = 0) -> str:
    return json.dumps({"node": node, "host": host, "attempt": attempt, "at": round(at, 3),
                       "beats": beats, "final": final}, separators=(",", ":"))


def state_changed(current: dict[int, dict[str, Any]], sent: dict[int, dict[str, Any]]) -> bool:
    """A rank appeared, changed state (started, saving, done), its file stopped or started being
    rewritten (``held_since``) or its process froze or thawed (``proc_state``): worth a line before
    the next tick."""
    return any(rank not in sent or sent[rank].get("state") != beat.get("state")
               or ("held_since" in sent[rank]) != ("held_since" in beat)
               or sent[rank].get("proc_state") != beat.get("proc_state")
               for rank, beat in current.items())


# A rank that has not stepped for this long is between steps: an evaluation, a save, a wait on its
# data loader workers, or a hang. Steady training steps more often and keeps one line a second.
BETWEEN_STEPS_AFTER_S = 1.0
# ran Python, wrote, used CPU (itself or its children)
_LIVENESS = ("python_at", "io_at", "compute_at")


def alive_between_steps(current: dict[int, dict[str, Any]], sent: dict[int, dict[str, Any]],
                        now: float) -> bool:
    """A rank between steps (none for ``BETWEEN_STEPS_AFTER_S``) shows it is alive: it ran Python
    (an evaluation), wrote (a save) or used CPU (its data loader workers loading). Worth a line at
    once: the hang rule's window can be 2 s, and with a line a second that news would reach the
    supervisor up to 1.75 s old (a tick, a look and a line), a healthy rank looking hung. A hung
    rank shows none, so it adds no lines; neither does a rank that is starting (its window is
    ``startup_timeout``) or done."""
    for rank, beat in current.items():
        progress_at, before = beat.get("progress_at"), sent.get(rank)
        if (before is None or beat.get("state") in (HeartbeatState.STARTING, HeartbeatState.DONE)
                or not isinstance(progress_at, (int, float))
                or now - progress_at <= BETWEEN_STEPS_AFTER_S):
            continue
        if any(beat.get(key) != before.get(key) for key in _LIVENESS if beat.get(key) is not None):
            return True
    return False


@dataclass(frozen=True)
class NodeSummary:
    node: int
    host: str
    at: float
    beats: dict[int, Heartbeat] = field(default_factory=dict)
    final: bool = False


def parse_summary(data: Any) -> NodeSummary:
    """A summary from its decoded JSON line; ValueError naming the field that is wrong. A heartbeat
    in it that does not parse is dropped (one bad file must not hide the node's other ranks)."""
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    node, host, at = data.get("node"), data.get("host"), data.get("at")
    if not isinstance(node, int) or isinstance(node, bool) or node < 0:
        raise ValueError(f"node: expected a node rank, got {node!r}")
    if not isinstance(host, str):
        raise ValueError(f"host: expected a string, got {host!r}")
    if not isinstance(at, (int, float)) or isinstance(at, bool) or not math.isfinite(at):
        raise ValueError(f"at: expected a unix time, got {at!r}")
    raw = data.get("beats") or []
    if not isinstance(raw, list):
        raise ValueError(f"beats: expected a list, got {type(raw).__name__}")
    per_node = {"time": float(at), "host": host, "attempt": data.get("attempt", 0), "node": node}
    beats = {}
    for item in raw:
        try:
            beat = heartbeat_from_dict({**item, **per_node} if isinstance(item, dict) else item)
        except ValueError:
            continue
        beats[beat.rank] = beat
    return NodeSummary(node, host, float(at), beats, bool(data.get("final")))





def dump_to_wire(dump: Any) -> dict[str, Any]:
    """A ``StackDump`` as JSON: what an agent sends back after taking its ranks' stacks."""
    return {"rank": dump.rank, "pid": dump.pid, "source": dump.source, "error": dump.error,
            "path": None if dump.path is None else str(dump.path),
            "threads": [{"id": t.id, "name": t.name, "active": t.active, "gil": t.gil,
                         "current": t.current,
                         "frames": [[f.function, f.file, f.line, f.native] for f in t.frames]}
                        for t in dump.threads]}


def dump_from_wire(data: dict[str, Any]) -> Any:
    from pathlib import Path

    from fsdp_orch.observe.stack_parse import Frame, ThreadStack
    from fsdp_orch.observe.stacks import StackDump

    threads = tuple(ThreadStack(t["id"], t["name"], t["active"],
                                tuple(Frame(*f) for f in t["frames"]),
                                bool(t.get("gil")), bool(t.get("current")))
                    for t in data.get("threads", []))
    return StackDump(int(data["rank"]), int(data["pid"]), threads, str(data.get("source", "")),
                     Path(data["path"]) if data.get("path") else None, str(data.get("error", "")))


__all__ = ["NodeSummary", "alive_between_steps", "changed_beats", "compact", "dump_from_wire",
           "dump_to_wire", "parse_summary", "state_changed", "summary_line",
           "with_process_states"]
