"""What does the supervisor pay to watch 16, 512 and 8192 ranks through the node agents, against
today's heartbeat files on the shared run folder, in the same run? A simulated cluster on this
machine.

Agent path: N nodes, each the real ``fsdp_orch.nodeagent.agent.NodeAgent``, as asyncio tasks spread
over ``--procs`` worker processes, fed by 8 simulated ranks per node, all streaming over loopback
TCP to one supervisor process that runs the real ``SummaryServer`` and, every poll_interval (1 s),
what the supervisor does: ``server.heartbeats()``, ``check_hang(...)``, ``server.lost_node()``.

Baseline (today's file path) at the same N: the simulated ranks write
``<run>/heartbeats/attempt-0/rank-R.json`` with ``write_heartbeat`` every 0.5 s (temp file + rename)
from ``--procs`` writer processes, and the supervisor process polls ``read_heartbeats`` +
``check_hang``.

A simulated rank behaves as the bootstrap's heartbeat does: its watcher writes every 0.5 s (``time``
and ``python_at`` = the write), training steps complete every 0.5 s for all ranks at once (FSDP's
collectives keep them in step), ``progress_at`` = the last step. At the hang, T (halfway through a
step), one rank stops in a native call: its step, ``progress_at`` and ``python_at`` freeze at T;
its peers block in the next collective with it, their ``python_at`` frozen 50 ms later (without
that, ``check_hang`` rightly vetoes: a peer still running Python is not hung). Their watchers go on
writing (``time`` advances). The agent path's ranks hold their beats in memory (``read_beats``
builds fresh dicts each call, as ``read_beat_files`` decodes them): node-local files of 8192 ranks
plus the agents reading them would double the load on 2 cores, and they are not on the run folder.

Measured per (path, N), over a steady window after every rank is seen:
- the supervisor process's CPU (core-seconds per wall second, /proc/PID/stat) and RSS (VmRSS,
  VmHWM);
- the run folder's file writes per second, counted with inotify (IN_CREATE | IN_MOVED_TO, the whole
  tree, watches added as folders appear), and the writes the baseline's writers achieved against
  the 2 per rank per second they aim at;
- detection: from T to ``check_hang``'s verdict (and whether it names the hung rank first);
- agent path only: ``capture_stacks({hung: pid})`` to the hung node's reply (the simulated py-spy
  takes 0.3 s) and ``stop_ranks`` to every node's reply or final line.
Targets (printed, not asserted): at 8192 ranks the supervisor under 0.25 core; detection within
heartbeat_timeout + 2 s; no heartbeat file on the run folder from the agent path.

The machine is shared with whatever else runs on it: the table says how many cores others took in
the window (the supervisor's CPU is its own core-seconds; its latencies suffer when the cores are
taken). The files path's writers wait on the disk (ext4 flushes a file replaced by rename), hence
``--writers`` 4 processes; the rate they reach is printed against the 2 writes per rank per second.

    .venv/bin/python bench/scale.py [--nodes 2,64,1024] [--quick] [--window 12] [--procs 2]
                                    [--writers 4] [--paths agent,files] [--run-root DIR]
                                    [--timeout 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import math
import multiprocessing as mp
import os
import random
import resource
import secrets
import select
import shutil
import struct
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

RANKS_PER_NODE = 8
WRITE_EVERY_S = 0.5  # the bootstrap's TICK_S: a rank's heartbeat refresh
STEP_S = 0.5
PEER_LAG_S = 0.05  # the peers enter the collective this long after the hung rank stopped
FAKE_PID = 400_000
PY_SPY_S = 0.3
STOP_GRACE_S = 5.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- the simulated ranks --------------------------------------------------------------------

def phase(rank: int) -> float:
    """Where in the 0.5 s period a rank's watcher writes: spread evenly, not in rank order."""
    return (rank * 0.6180339887) % 1.0 * WRITE_EVERY_S


def beat(rank: int, w: float, t0: float, hang_at: float, hung: int, host: str) -> dict[str, Any]:
    """The heartbeat a rank writes at ``w`` (keys as ``Heartbeat.to_json``)."""
    if hang_at and w >= hang_at:
        step = int((hang_at - t0) / STEP_S)
        python_at = min(w, hang_at if rank == hung else hang_at + PEER_LAG_S)
    else:
        step = int((w - t0) / STEP_S)
        python_at = w
    return {"rank": rank, "attempt": 0, "step": step, "loss": round(2.0 + 1.0 / (1 + step), 6),
            "time": w, "state": "training", "pid": FAKE_PID + rank, "metrics": {"lr": 0.0003},
            "progress_at": t0 + step * STEP_S, "python_at": python_at, "host": host}


def node_reader(node: int, t0: float, hang: Any, hung: int):
    """The agent's ``read_beats`` for one simulated node: each rank's beat as of its last write."""
    ranks = list(range(node * RANKS_PER_NODE, (node + 1) * RANKS_PER_NODE))
    phases = [t0 + phase(r) for r in ranks]
    host = f"sim-node-{node}"

    def read() -> dict[int, dict[str, Any]]:
        now, hang_at = time.time(), hang.value
        out = {}
        for rank, first in zip(ranks, phases, strict=True):
            k = math.floor((now - first) / WRITE_EVERY_S)
            if k >= 0:
                out[rank] = beat(rank, first + k * WRITE_EVERY_S, t0, hang_at, hung, host)
        return out
    return read


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def agent_worker(nodes: list[int], port: int, token: str, t0: float, hang: Any, hung: int,
                 stop: Any, sent: Any) -> None:
    """Runs the real NodeAgent of each of ``nodes`` in one event loop until stopped."""
    from fsdp_orch.nodeagent.agent import NodeAgent

    raise_fd_limit()
    ended: dict[int, float] = {}

    def alive(node: int) -> bool:
        return not stop.value and time.time() < ended.get(node, math.inf)

    def on_stop(node: int, grace: float) -> dict[str, Any]:
        ended[node] = time.time() + 0.02  # SIGTERM: the ranks exit, then the launcher
        return {"killed": [FAKE_PID + r
                           for r in range(node * RANKS_PER_NODE, (node + 1) * RANKS_PER_NODE)]}

    def on_stacks(pids: dict[int, int], folder: str) -> dict[str, Any]:
        time.sleep(PY_SPY_S)  # py-spy dump of one process
        return {"dumps": {str(r): {"rank": r, "pid": p, "source": "sim", "error": "", "path": None,
                                   "threads": []} for r, p in pids.items()}}

    async def main() -> None:
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(max_workers=min(64, len(nodes))))
        endpoint = ("127.0.0.1", port, token)
        agents = [NodeAgent(node, f"sim-node-{node}", node_reader(node, t0, hang, hung),
                            lambda: endpoint, launcher_alive=lambda n=node: alive(n),
                            on_stop=lambda g, n=node: on_stop(n, g), on_stacks=on_stacks)
                  for node in nodes]

        async def one(agent: NodeAgent) -> None:
            await asyncio.sleep(random.uniform(0, 1.0))  # nodes are not in lockstep
            await agent.run()

        async def count() -> None:
            while True:
                sent.value = sum(a.lines_sent for a in agents)
                await asyncio.sleep(0.2)
        counting = asyncio.ensure_future(count())
        await asyncio.gather(*(one(a) for a in agents))
        counting.cancel()
    asyncio.run(main())


def writer_worker(ranks: list[int], run_dir: str, t0: float, hang: Any, hung: int, stop: Any,
                  written: Any) -> None:
    """Today's path: each rank's heartbeat file rewritten every 0.5 s (write_heartbeat); when the
    writes fall behind, as fast as they go."""
    from fsdp_orch.observe.heartbeats import Heartbeat, heartbeat_dir, write_heartbeat

    folder = heartbeat_dir(run_dir, 0)
    folder.mkdir(parents=True, exist_ok=True)
    order = sorted(ranks, key=phase)
    paths = [str(folder / f"rank-{r}.json") for r in order]
    hosts = [f"sim-node-{r // RANKS_PER_NODE}" for r in order]
    due = [t0 + phase(r) for r in order]
    while not stop.value:
        for i, rank in enumerate(order):
            now = time.time()
            if due[i] > now + 0.002:
                time.sleep(due[i] - now)
                if stop.value:
                    return
                now = time.time()
            write_heartbeat(paths[i], Heartbeat(**beat(rank, now, t0, hang.value, hung, hosts[i])))
            written.value += 1
            due[i] = max(due[i] + WRITE_EVERY_S, now)


# --- the supervisor ---------------------------------------------------------------------------

def supervisor_main(path: str, world: int, run_dir: str, token: str, timeout: float,
                    conn: Any) -> None:
    """What the supervisor does every poll_interval, on the agent path or today's files; reports a
    status line a poll to the bench, and after the hang, the verdict, stacks and stop timings."""
    from fsdp_orch.decide.watchdog import check_hang
    from fsdp_orch.jobspec.schema import Watch
    from fsdp_orch.observe.heartbeats import read_heartbeats

    raise_fd_limit()
    watch = Watch(heartbeat_timeout=timeout)
    server = None
    if path == "agent":
        from fsdp_orch.nodeagent.server import SummaryServer

        server = SummaryServer(token)
        conn.send(("port", server.start()))
    started = time.time()
    hang: tuple[float, int] | None = None
    false_verdicts: list[str] = []
    while True:
        t = time.perf_counter()
        beats = server.heartbeats() if server is not None else read_heartbeats(run_dir, 0)
        now = time.time()
        verdict = check_hang(beats, world_size=world, attempt_started=started, now=now, watch=watch)
        lost = server.lost_node() if server is not None else None
        poll_s = time.perf_counter() - t
        sample = [b.time
                  for r in range(0, world, max(1, world // 128)) if (b := beats.get(r)) is not None]
        age = sorted(now - w for w in sample)
        states = server.nodes() if server is not None else {}
        conn.send(("status", {"at": time.monotonic(), "ranks": len(beats),
                              "nodes": len(states) if server else None,
                              "connected": sum(s.connected for s in states.values()),
                              "lines": server.lines if server else None, "lost": lost,
                              "poll_s": poll_s,
                              "age_median": age[len(age) // 2] if age else None,
                              "age_max": age[-1] if age else None,
                              "false_verdicts": len(false_verdicts)}))
        if verdict is not None and (hang is None or now < hang[0]):
            false_verdicts.append(verdict.evidence)
        elif verdict is not None and hang is not None:
            result: dict[str, Any] = {"detect_s": now - hang[0],
                                      "first_suspect": verdict.suspects[0],
                                      "evidence": verdict.evidence, "poll_s": poll_s}
            if server is not None:
                t = time.perf_counter()
                replies = server.capture_stacks({hang[1]: FAKE_PID + hang[1]},
                                                os.path.join(run_dir, "attempt-0", "stacks"))
                result["stacks_s"] = time.perf_counter() - t
                result["stacks_ok"] = any(str(hang[1]) in (r.get("dumps") or {})
                                          for r in replies.values())
                t = time.perf_counter()
                replies = server.stop_ranks(STOP_GRACE_S)
                result["stop_s"] = time.perf_counter() - t
                nodes = server.nodes()
                result["stop_replied"] = len(replies)
                result["stop_ended"] = sum(1 for s in nodes.values()
                                           if s.final or not s.connected or s.node in replies)
                result["nodes"] = len(nodes)
            conn.send(("result", result))
            break
        deadline = time.monotonic() + watch.poll_interval
        while (left := deadline - time.monotonic()) > 0:
            if conn.poll(left):
                message = conn.recv()
                if message[0] == "hang":
                    hang = (message[1], message[2])
                elif message[0] == "exit":
                    return
    while True:
        if conn.recv()[0] == "exit":
            if server is not None:
                server.close()
            return


# --- measuring from outside -----------------------------------------------------------------

IN_MOVED_TO, IN_CREATE, IN_Q_OVERFLOW, IN_ISDIR = 0x80, 0x100, 0x4000, 0x40000000


class TreeWatch:
    """Counts file creations and renames-into-place anywhere under ``root`` (inotify, in a
    thread)."""

    def __init__(self, root: str):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.dirs: dict[int, str] = {}
        self.creates = self.renames = self.tmp_creates = self.overflows = 0
        self.running = True
        self._add_tree(root)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _add_tree(self, top: str) -> None:
        for folder, _, _ in os.walk(top):
            wd = self.libc.inotify_add_watch(self.fd, folder.encode(), IN_CREATE | IN_MOVED_TO)
            if wd >= 0:
                self.dirs[wd] = folder

    def _loop(self) -> None:
        while self.running:
            if not select.select([self.fd], [], [], 0.2)[0]:
                continue
            try:
                data = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                continue
            off = 0
            while off < len(data):
                wd, mask, _, size = struct.unpack_from("iIII", data, off)
                name = data[off + 16:off + 16 + size].rstrip(b"\0").decode(errors="replace")
                off += 16 + size
                if mask & IN_Q_OVERFLOW:
                    self.overflows += 1
                elif mask & IN_ISDIR:
                    if wd in self.dirs:
                        self._add_tree(os.path.join(self.dirs[wd], name))
                elif mask & IN_MOVED_TO:
                    self.renames += 1
                elif name.endswith(".tmp"):
                    self.tmp_creates += 1
                else:
                    self.creates += 1

    def counts(self) -> dict[str, int]:
        return {"creates": self.creates, "renames": self.renames, "tmp_creates": self.tmp_creates,
                "overflows": self.overflows}

    def close(self) -> None:
        self.running = False
        self.thread.join(2)
        os.close(self.fd)


def file_system(path: str) -> str:
    """The type of the file system holding ``path`` (from /proc/mounts: the longest mount
    prefix)."""
    best, kind = "", "?"
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if ((path == parts[1] or path.startswith(parts[1].rstrip("/") + "/"))
                and len(parts[1]) > len(best)):
                best, kind = parts[1], f"{parts[2]} ({parts[0]} on {parts[1]})"
    return kind


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def machine_busy() -> tuple[float, float]:
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)  # all but idle, iowait; total


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1])
    return out


class Statuses:
    """The supervisor's status lines, drained from its pipe."""

    def __init__(self, conn: Any):
        self.conn, self.last, self.history, self.result, self.port = conn, {}, [], None, None

    def drain(self, wait: float = 0.0) -> None:
        while self.conn.poll(wait):
            wait = 0.0
            kind, body = self.conn.recv()
            if kind == "status":
                self.last = body
                self.history.append((time.monotonic(), body))
            elif kind == "result":
                self.result = body
            elif kind == "port":
                self.port = body


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def run_case(path: str, nodes: int, args: argparse.Namespace, root: str) -> dict[str, Any]:
    world = nodes * RANKS_PER_NODE
    run_dir = os.path.join(root, f"run-{path}-{nodes}")
    os.makedirs(os.path.join(run_dir, "attempt-0"))
    watcher = TreeWatch(run_dir)
    ctx = mp.get_context("spawn")
    hang, stop = ctx.RawValue("d", 0.0), ctx.RawValue("i", 0)
    here, there = ctx.Pipe()
    token = secrets.token_hex(16)
    hung = world // 2 + 3 if world > 8 else world - 1
    case: dict[str, Any] = {"path": path, "nodes": nodes, "ranks": world, "hung_rank": hung,
                            "reached": False}
    supervisor = ctx.Process(target=supervisor_main,
                             args=(path, world, run_dir, token, args.timeout, there), daemon=True)
    supervisor.start()
    status = Statuses(here)
    workers: list[Any] = []
    counters: list[Any] = []
    procs = max(1, min(args.procs if path == "agent" else args.writers, nodes))
    chunks = [list(range(nodes))[i::procs] for i in range(procs)]
    t0 = time.time() + 1.0
    try:
        if path == "agent":
            deadline = time.monotonic() + 30
            while status.port is None and time.monotonic() < deadline:
                status.drain(0.5)
            for chunk in chunks:
                counters.append(ctx.RawValue("q", 0))
                workers.append(ctx.Process(target=agent_worker, daemon=True,
                                           args=(chunk, status.port, token, t0, hang, hung, stop,
                                                 counters[-1])))
        else:
            for chunk in chunks:
                counters.append(ctx.RawValue("q", 0))
                ranks = [r for n in chunk
                         for r in range(n * RANKS_PER_NODE, (n + 1) * RANKS_PER_NODE)]
                workers.append(ctx.Process(target=writer_worker, daemon=True,
                                           args=(ranks, run_dir, t0, hang, hung, stop,
                                                 counters[-1])))
        for worker in workers:
            worker.start()
        log(f"[scale]   supervisor pid {supervisor.pid}, workers {[w.pid for w in workers]}")
        started = last_log = time.monotonic()
        while time.monotonic() - started < args.ready_timeout:
            status.drain(0.5)
            if time.monotonic() - last_log >= 5:
                last_log = time.monotonic()
                log(f"[scale]   {last_log - started:.0f}s: {status.last}")
            if (status.last.get("ranks") == world
                and (path != "agent" or status.last.get("nodes") == nodes)):
                break
        case["ready_s"] = time.monotonic() - started
        case["verdicts_while_connecting"] = status.last.get("false_verdicts", 0)
        if status.last.get("ranks") != world:
            case["problem"] = (f"only {status.last.get('ranks', 0)} of {world} ranks seen within "
                               f"{args.ready_timeout:g}s")
            return case
        time.sleep(args.settle)
        status.drain()
        pids = [supervisor.pid, *(w.pid for w in workers), os.getpid()]
        before = ({pid: cpu_ticks(pid) for pid in pids}, machine_busy(), watcher.counts(),
                  sum(c.value for c in counters), status.last.get("lines"), len(status.history),
                  time.monotonic())
        time.sleep(args.window)
        status.drain()
        after = ({pid: cpu_ticks(pid) for pid in pids}, machine_busy(), watcher.counts(),
                 sum(c.value for c in counters), status.last.get("lines"), len(status.history),
                 time.monotonic())
        wall = after[6] - before[6]
        mem = memory_kib(supervisor.pid)
        polls = [body for _, body in status.history[before[5]:after[5]]]
        case.update({
            "window_s": wall,
            "supervisor_cpu": ((after[0][supervisor.pid] - before[0][supervisor.pid]) / CLK_TCK
                               / wall),
            "supervisor_rss_mib": mem["VmRSS"] / 1024, "supervisor_hwm_mib": mem["VmHWM"] / 1024,
            "sim_cpu": sum(after[0][p] - before[0][p] for p in pids[1:-1]) / CLK_TCK / wall,
            "bench_cpu": (after[0][pids[-1]] - before[0][pids[-1]]) / CLK_TCK / wall,
            "machine_busy_cores": ((after[1][0] - before[1][0]) / max(1, after[1][1] - before[1][1])
                                   * os.cpu_count()),
            "poll_ms_max": 1000 * max((p["poll_s"] for p in polls), default=0.0),
            "poll_ms_median": (1000 * sorted(p["poll_s"] for p in polls)[len(polls) // 2] if polls
                               else 0.0),
            "run_folder_files_per_s": (after[2]["renames"] - before[2]["renames"]
                                       + after[2]["creates"] - before[2]["creates"]) / wall,
            "run_folder_events_per_s": sum(after[2][k] - before[2][k]
                                           for k in ("creates", "renames", "tmp_creates")) / wall,
            "inotify_overflows": after[2]["overflows"] - before[2]["overflows"],
            "lost_nodes_seen": sorted({p["lost"] for p in polls if p.get("lost")}),
            "false_verdicts": (status.last.get("false_verdicts", 0)
                               - case["verdicts_while_connecting"]),
            "polls_per_s": len(polls) / wall,
            "view_age_median_s": (sorted(p["age_median"] for p in polls)[len(polls) // 2] if polls
                                  else None),
            "view_age_max_s": max(p["age_max"] for p in polls) if polls else None,
        })
        if path == "agent":
            first, last = polls[0], polls[-1]  # the server's count, at the supervisor's own polls
            case["lines_per_s"] = (last["lines"] - first["lines"]) / max(1e-9,
                                                                         last["at"] - first["at"])
            case["lines_sent_per_s"] = (after[3] - before[3]) / wall
        else:
            case["writes_per_s"] = (after[3] - before[3]) / wall
            case["writes_target_per_s"] = world / WRITE_EVERY_S
        # the hang: halfway through a step, at least 0.3 s from now
        step = math.ceil((time.time() + 0.3 - t0) / STEP_S)
        hang_at = t0 + step * STEP_S + STEP_S / 2
        hang.value = hang_at
        here.send(("hang", hang_at, hung))
        deadline = time.monotonic() + args.timeout + 30 + (STOP_GRACE_S + 10 if path == "agent"
                                                           else 0)
        while status.result is None and time.monotonic() < deadline:
            status.drain(0.5)
        if status.result is None:
            case["problem"] = "no verdict"
            return case
        case.update(status.result)
        case["reached"] = True
        return case
    finally:
        stop.value = 1
        try:
            here.send(("exit",))
        except OSError:
            pass
        for proc in [supervisor, *workers]:
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
        watcher.close()
        shutil.rmtree(run_dir, ignore_errors=True)


# --- the report -------------------------------------------------------------------------------

def fmt(value: Any, spec: str, none: str = "-") -> str:
    return none if value is None else format(value, spec)


def others(c: dict[str, Any]) -> float:
    """The cores busy with processes not this bench's (the machine is shared)."""
    return max(0.0, c["machine_busy_cores"] - c["supervisor_cpu"] - c["sim_cpu"] - c["bench_cpu"])


def table(cases: list[dict[str, Any]], timeout: float) -> list[str]:
    head = (f"{'path':8} {'nodes':>5} {'ranks':>5} | {'sup CPU':>7} {'sup RSS':>8} {'poll ms':>9} "
            f"{'age s':>9} | {'detect s':>17} {'1st':>3} | {'stacks s':>8} {'stop s':>6} | "
            f"{'run files/s':>11} {'writes/s (of target)':>21} | {'sim CPU':>7} {'busy':>5} "
            f"{'others':>6}")
    lines = [head, "-" * len(head)]
    for c in cases:
        if not c.get("window_s"):
            lines.append(f"{c['path']:8} {c['nodes']:>5} {c['ranks']:>5} | not reached: "
                         f"{c.get('problem')}")
            continue
        detect = (f"{c['detect_s']:5.2f} (t/o+{c['detect_s'] - timeout:4.2f})" if "detect_s" in c
                  else c.get("problem", "-"))
        writes = (f"{c['writes_per_s']:7.0f} of {c['writes_target_per_s']:5.0f}"
                  if "writes_per_s" in c
                  else f"{c.get('lines_per_s', 0):5.0f}/{c.get('lines_sent_per_s', 0):<5.0f} "
                       "lines/s")
        first = "-" if "first_suspect" not in c else ("yes" if c["first_suspect"] == c["hung_rank"]
                                                      else "NO")
        lines.append(
            f"{c['path']:8} {c['nodes']:>5} {c['ranks']:>5} | {c['supervisor_cpu']:7.3f} "
            f"{c['supervisor_rss_mib']:6.1f}Mi {c['poll_ms_median']:4.0f}/{c['poll_ms_max']:<4.0f} "
            f"{fmt(c['view_age_median_s'], '4.1f')}/{fmt(c['view_age_max_s'], '<4.1f')} | "
            f"{detect:>17} {first:>3} | {fmt(c.get('stacks_s'), '8.2f'):>8} "
            f"{fmt(c.get('stop_s'), '6.2f'):>6} | {c['run_folder_files_per_s']:11.0f} {writes:>21} "
            f"| {c['sim_cpu']:7.2f} {c['machine_busy_cores']:5.2f} {others(c):6.2f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="2,64,1024",
                        help="comma-separated node counts (8 ranks each)")
    parser.add_argument("--quick", action="store_true", help="a short window and settle (5 s, 1 s)")
    parser.add_argument("--window", type=float, default=12.0, help="the steady window, seconds")
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds after every rank is seen")
    parser.add_argument("--procs", type=int, default=2,
                        help="processes running the simulated nodes' agents")
    parser.add_argument("--writers", type=int, default=4,
                        help="processes writing the files path's heartbeats (their writes wait "
                             "on the disk)")
    parser.add_argument("--run-root", default=None,
                        help="where the run folders go (default: the temp dir; its file system is "
                             "the stand-in for the shared one)")
    parser.add_argument("--timeout", type=float, default=5.0, help="heartbeat_timeout, seconds")
    parser.add_argument("--ready-timeout", type=float, default=90.0)
    parser.add_argument("--paths", default="agent,files", help="which of agent,files to run")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    if args.quick:
        args.window, args.settle = 5.0, 1.0
    sizes = [int(n) for n in args.nodes.split(",") if n.strip()]
    began = time.monotonic()
    cases = []
    with tempfile.TemporaryDirectory(prefix="fsdp-orch-scale-", dir=args.run_root) as root:
        fs = file_system(root)
        for nodes in sizes:
            for path in [p for p in ("agent", "files") if p in args.paths.split(",")]:
                log(f"[scale] {path} path, {nodes} nodes x {RANKS_PER_NODE} ranks ...")
                case = run_case(path, nodes, args, root)
                shown = {k: v for k, v in case.items() if k != "evidence"}
                log(f"[scale]   {json.dumps(shown, default=str)}")
                cases.append(case)
    wall = time.monotonic() - began

    print(f"simulated cluster on {os.cpu_count()} cores: {RANKS_PER_NODE} ranks/node writing every "
          f"{WRITE_EVERY_S:g}s, poll_interval 1s, heartbeat_timeout {args.timeout:g}s, "
          f"{args.window:g}s steady window; agents in {args.procs} processes, file writers in "
          f"{args.writers}")
    print(f"run folders on {fs}")
    print("agent path: real NodeAgent + SummaryServer over loopback; its simulated ranks keep "
          "their beats in memory (no node-local files: at 8192 ranks those writes would take the 2 "
          "cores), so the run folder holds what the design puts there: nothing")
    print("files path: write_heartbeat to <run>/heartbeats/attempt-0 + read_heartbeats each "
          "poll (today)")
    print("sup CPU: supervisor process, core-s per s; poll ms: median/max of "
          "heartbeats()+check_hang(); age s: median/max age of the beats the supervisor judged "
          "(now - the rank's write); detect: T to verdict; 1st: the verdict names the hung rank "
          "first; run files/s: inotify; writes/s: the files path's heartbeat writes, the agent "
          "path's summary lines taken/sent; sim CPU: the simulated nodes' processes; busy: the "
          "machine's cores in use, others: of those, not this bench's\n")
    for line in table(cases, args.timeout):
        print(line)
    print()
    ratios = {}
    by = {(c["path"], c["nodes"]): c for c in cases}
    for nodes in sizes:
        a, f = by.get(("agent", nodes)), by.get(("files", nodes))
        if not (a and f and a.get("window_s") and f.get("window_s")):
            continue
        per_poll = [c["supervisor_cpu"] / c["polls_per_s"] if c["polls_per_s"] else None
                    for c in (a, f)]
        r = {"cpu": a["supervisor_cpu"] / f["supervisor_cpu"] if f["supervisor_cpu"] else None,
             "cpu_per_poll": per_poll[0] / per_poll[1] if per_poll[0] and per_poll[1] else None,
             "rss": a["supervisor_rss_mib"] / f["supervisor_rss_mib"],
             "detect": (a["detect_s"] / f["detect_s"] if "detect_s" in a and "detect_s" in f
                        else None),
             "files": (a["run_folder_files_per_s"] / f["run_folder_files_per_s"]
                       if f["run_folder_files_per_s"] else None)}
        ratios[nodes] = r
        r["view_age"] = (a["view_age_median_s"] / f["view_age_median_s"]
                         if a["view_age_median_s"] and f["view_age_median_s"] else None)
        print(f"ratio agent/files at {nodes * RANKS_PER_NODE:>5} ranks: supervisor CPU "
              f"{fmt(r['cpu'], '.2f')}, (per poll {fmt(r['cpu_per_poll'], '.2f')}), "
              f"RSS {r['rss']:.2f}, detection {fmt(r['detect'], '.2f')}, view age "
              f"{fmt(r['view_age'], '.2f')}, run-folder files/s {fmt(r['files'], '.3f')} "
              f"({a['run_folder_files_per_s']:.0f} vs {f['run_folder_files_per_s']:.0f})")
    for c in cases:
        if c["path"] == "files" and c.get("window_s"):
            print(f"files path at {c['ranks']} ranks: the writers reached "
                  f"{c['writes_per_s']:.0f} of {c['writes_target_per_s']:.0f} writes/s "
                  f"({100 * c['writes_per_s'] / c['writes_target_per_s']:.0f}%)"
                  + (f", inotify queue overflowed {c['inotify_overflows']}x (file counts "
                     "are a floor)"
                     if c["inotify_overflows"] else ""))
        if c.get("window_s") and c["polls_per_s"] < 0.9:
            print(f"{c['path']} path at {c['ranks']} ranks: the supervisor polled "
                  f"{c['polls_per_s']:.2f} times/s (a poll took {c['poll_ms_median']:.0f} ms, then "
                  "poll_interval): its CPU is for that rate, "
                  f"{c['supervisor_cpu'] / c['polls_per_s']:.2f} core-s a poll")
        if c.get("verdicts_while_connecting"):
            print(f"{c['path']} at {c['ranks']} ranks: every rank seen {c['ready_s']:.1f}s "
                  f"after the start; meanwhile {c['verdicts_while_connecting']} poll(s) judged the "
                  f"unseen ranks hung (heartbeat_timeout {args.timeout:g}s from the "
                  "attempt's start)")
        if c.get("false_verdicts") or c.get("lost_nodes_seen"):
            print(f"{c['path']} at {c['ranks']} ranks, steady window: "
                  f"{c.get('false_verdicts')} verdict(s) before the hang, lost nodes: "
                  f"{c.get('lost_nodes_seen')}")
        if c["path"] == "agent" and "stop_s" in c:
            print(f"agent path at {c['ranks']} ranks: stop reached {c['stop_ended']} of "
                  f"{c['nodes']} nodes ({c['stop_replied']} replied), stacks reply "
                  f"{'with' if c['stacks_ok'] else 'WITHOUT'} the hung rank")
    reached = [c["nodes"] for c in cases if c.get("reached")]
    both = [n for n in sizes
            if by.get(("agent", n), {}).get("reached") and by.get(("files", n), {}).get("reached")]
    print(f"largest N reached: {max(both) if both else 'none'} nodes x {RANKS_PER_NODE} = "
          f"{max(both) * RANKS_PER_NODE if both else 0} ranks (both paths, to a verdict)"
          + ("" if set(reached) >= set(sizes)
             else f"; not reached: {sorted(set(sizes) - set(both))}"))

    targets = []
    top = by.get(("agent", max(sizes)))
    if top and top.get("window_s"):
        targets.append((f"supervisor CPU at {top['ranks']} ranks < 0.25 core",
                        top["supervisor_cpu"] < 0.25, f"{top['supervisor_cpu']:.3f}"))
    for c in cases:
        if "detect_s" in c and c["path"] == "agent":
            targets.append((f"agent detection at {c['ranks']} ranks <= timeout + 2 s",
                            c["detect_s"] <= args.timeout + 2, f"{c['detect_s']:.2f} s"))
    agent_files = [c["run_folder_files_per_s"]
                   for c in cases if c["path"] == "agent" and c.get("window_s")]
    if agent_files:
        targets.append(("zero run-folder files from the agent path",
                        all(v == 0 for v in agent_files), f"{max(agent_files):.2f}/s at most"))
    for name, ok, value in targets:
        print(f"target {'PASS' if ok else 'FAIL'}: {name} ({value})")
    late = [f"{c['detect_s']:.2f} s at {c['ranks']} ranks" for c in cases
            if c["path"] == "files" and "detect_s" in c]
    if late:
        print(f"(baseline files path detection, for reference: {', '.join(late)})")
    print(f"bench wall time {wall:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"cases": cases, "ratios": ratios, "wall_s": wall,
                                               "targets": [{"name": n, "pass": ok, "value": v}
                                                           for n, ok, v in targets],
                                               "timeout_s": args.timeout, "window_s": args.window,
                                               "run_file_system": fs},
                                              indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
