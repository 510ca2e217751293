"""Soak, "a month in an hour" (issue 60): the demo (``examples/demo``, ``fsdp_orch.runtime``) on 2
CPU ranks on the local kind for at least ``--minutes`` of wall time, with a fault every 20-30 s
(seeded), drawn in turn from every kind fsdp-orch injects, and what the long run does to the
supervisor, the run folder, the index and ``status``.

Faults, one kind after another in shuffled rounds of all seven:

* in the ranks, through ``FSDP_ORCH_FAULT`` with ``attempt=K`` and ``after=S`` (seconds after the
  attempt's first step: the step each attempt resumes from is not known in advance): ``hang``,
  ``crash``, ``kill`` (SIGKILL), ``collective_timeout``, ``checkpoint_crash`` (the first save after
  S, killed half-way: its shards written, not committed);
* from outside, by a thread of this bench: ``pause`` (SIGSTOP of every process of the attempt, node
  agent, torchrun and ranks, for 3-8 s, under ``watch.node_timeout``: the job must train on in the
  same attempt) and ``lost_node``: the same SIGSTOP, never continued. The local kind runs one
  machine and cannot leave a node out, but it can lose its node: a frozen node (a dead host, a
  partition) is what the supervisor sees of a lost one, its agent silent past
  ``watch.node_timeout``; the supervisor must call it lost and stop it (SIGKILL ends a stopped
  process) and the next attempt runs on the same machine.

The demo's ``train.py`` runs unchanged under a wrapper the bench writes beside its copy
(``soak_train.py``), which sets ``--steps`` at each attempt's start from a file: no end until
``--minutes`` have passed and ``--faults`` faults (2 a minute by default) have been done: on a
loaded machine, or with the lost nodes' 30 s node timeouts, faults come less often than planned.
From then on, the latest committed step and TAIL_S seconds of steps, so the attempt after the first
fault past the deadline trains a short tail and the job ends SUCCEEDED, whatever the step time
turned out to be on a shared machine. A clean calibration run of the same job gives the step time
(saves included) and the start-up the fault times are planned with. The restart settings are the
demo's (the user's defaults: no cap, 3 failures in a row without progress, a 1 s backoff after
progress); only the checkpoint interval is shrunk (10 steps, async saves).

After each attempt ends, the bench archives its logs (``supervise/attempt_archive.py``: what the
supervisor is to do after deciding on a restart; idempotent) unless ``--no-archive``.

Printed in one run: the final state and every attempt's outcome; goodput and its buckets (``status
--json``); the supervisor's RSS and open files at the start and end; bytes and files of the run
folder, the event log, the index and the node's tmp folder as attempts go by; ``status`` latency at
the start, late in the run and at the end; checkpoints lost (a committed checkpoint gone other than
by keep_last pruning) and steps trained twice beyond what the last commit forced. Targets:
SUCCEEDED, 0 checkpoints lost, supervisor RSS growth <= 10 MB, run-folder growth per attempt
bounded, status latency at the end <= 1.5x the start, at least ``--faults`` faults. Progress to
stderr; exit status 1 if a target is missed.

    .venv/bin/python bench/soak.py [--minutes 30] [--seed 0] [--keep] [--json]
    .venv/bin/python bench/soak.py --minutes 3      # a quick try
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fsdp_orch.nodeagent.beat_dir import NODE_TMP, user_tmp_root
from fsdp_orch.observe.proctree import job_processes, signal_pids
from fsdp_orch.places.builtin import SUPERVISOR_MODULE
from fsdp_orch.supervise.attempt_archive import HEAD_BYTES, TAIL_BYTES, archive_attempt

REPO = Path(__file__).resolve().parents[1]
IN_RANKS = ("hang", "crash", "kill", "collective_timeout", "checkpoint_crash")
OUTSIDE = ("pause", "lost_node")
KINDS = IN_RANKS + OUTSIDE
INTERVAL = 10  # steps between saves
KEEP_LAST = 3  # the demo's checkpoint.keep_last
NODE_TIMEOUT_S = 30.0  # watch.node_timeout's default
# From an ending fault to its verdict: a crash's exit is seen at once, a hang after the adaptive
# window (a few seconds here), a lost node after the node timeout. From the verdict to the next
# attempt's first step (teardown, backoff, start-up from the warm standby): the calibration's.
DETECTION_S = {"hang": 4.0, "collective_timeout": 4.0, "lost_node": NODE_TIMEOUT_S + 2.0}
PLAN_SPANS = 2.0  # faults are planned over this many times --minutes: the job never runs out
TAIL_S = 10.0  # what the last attempt trains past the latest checkpoint once --minutes are up
NO_END = 10**9  # --steps until then
WRAPPER = '''"""The demo's train.py with --steps read from soak_steps at each attempt's start
(bench/soak.py writes it: no end until the soak's time is up, then the latest checkpoint's step and
a short tail)."""
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
argv = sys.argv[1:]
argv[argv.index("--steps") + 1] = (here / "soak_steps").read_text().strip()
sys.argv[1:] = argv

import train  # noqa: E402

train.main()
'''
TARGET_RSS_MB = 10.0
# An ended attempt's folder besides its logs: launch script, stacks, flight-recorder dumps (gzip)
FIXED_BYTES = 256 * 1024
TARGET_FAULTS_PER_MINUTE = 2.0  # "at least 60 faults in 30 min"
# What a failed attempt's category may be, by the fault planned to end it.
EXPECTED = {"crash": {"injected_fault"}, "kill": {"injected_fault", "killed_sigkill"},
            "checkpoint_crash": {"injected_fault", "checkpoint_error"},
            "hang": {"hang"}, "collective_timeout": {"hang", "collective_timeout", "nccl_error"},
            "lost_node": {"preemption_or_node_lost"}}
TARGET_LATENCY_RATIO = 1.5


def log(*parts: object) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}]", *parts, file=sys.stderr, flush=True)


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
    env["FSDP_ORCH_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "fsdp_orch", *args], env=env, capture_output=True,
                          text=True, check=False)


# --- the plan (pure) ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Planned:
    number: int  # in the soak's order
    kind: str
    attempt: int  # the attempt it happens in
    after: float  # seconds after the end of that attempt's first step
    rank: int
    pause_s: float = 0.0  # for pause
    at: float = 0.0  # estimated seconds after attempt 0's first step

    @property
    def ends_attempt(self) -> bool:
        return self.kind != "pause"

    def env(self) -> str:
        return f"{self.kind}:after={self.after:.1f}:rank={self.rank}:attempt={self.attempt}"


def plan_faults(rng: random.Random, span_s: float, recovery_s: float, min_after_s: float,
                gap_s: tuple[float, float] = (20.0, 30.0),
                pause_s: tuple[float, float] = (3.0, 8.0)) -> list[Planned]:
    """Faults ``gap_s`` apart (as far as the time from a fault to the next attempt's first step
    allows: each attempt trains ``min_after_s`` at least, so it saves a new checkpoint), over
    ``span_s`` seconds; kinds in shuffled rounds of all of :data:`KINDS`. Pure."""
    plan: list[Planned] = []
    bag: list[str] = []
    attempt = 0
    last: Planned | None = None  # the previous fault
    while True:
        if not bag:
            bag = list(KINDS)
            rng.shuffle(bag)
        kind, gap = bag.pop(), rng.uniform(*gap_s)
        if last is None or last.ends_attempt:
            lead = 0.0 if last is None else DETECTION_S.get(last.kind, 1.0) + recovery_s
            after = max(min_after_s, gap - lead)
            at = (0.0 if last is None else last.at + lead) + after
        else:  # after a pause, in the same attempt
            after, at = last.after + gap, last.at + gap
        if at > span_s:
            return plan
        last = Planned(len(plan), kind, attempt, round(after, 1), rng.randrange(2),
                       round(rng.uniform(*pause_s), 1) if kind == "pause" else 0.0, round(at, 1))
        plan.append(last)
        if last.ends_attempt:
            attempt += 1


# --- what the run leaves (pure checks) ---------------------------------------------------------

def checkpoints_lost(committed: dict[int, float], gone: dict[int, float], present: set[int],
                     keep_last: int = KEEP_LAST) -> list[int]:
    """Committed steps that disappeared other than by keep_last pruning: gone while fewer than
    ``keep_last`` newer ones had been committed (``committed``: step -> when first seen committed;
    ``gone``: step -> when seen gone). A step still ``present`` is not lost. Pure."""
    lost = []
    for step, at in sorted(gone.items()):
        if step in present:
            continue
        newer = [s for s, seen in committed.items() if s > step and seen <= at]
        if len(newer) < keep_last:
            lost.append(step)
    return lost


def trained_twice(steps_by_attempt: dict[int, set[int]]) -> int:
    """Steps trained by more than one attempt, once for each attempt past the first. Pure."""
    seen: dict[int, int] = {}
    for steps in steps_by_attempt.values():
        for step in steps:
            seen[step] = seen.get(step, 0) + 1
    return sum(n - 1 for n in seen.values())


def forced_rework(reached: dict[int, int], resumed: dict[int, int | None],
                  newest_before: dict[int, int]) -> tuple[int, int]:
    """(steps the faults forced to train again: each failed attempt's last step less the newest
    checkpoint committed before the next attempt started; steps beyond that: the next attempt
    resumed from an older one). ``reached``: attempt -> its last step; ``resumed``: attempt ->
    the step it resumed from; ``newest_before``: attempt -> the newest committed step when it
    started. Pure."""
    forced = beyond = 0
    for attempt, last in reached.items():
        nxt = attempt + 1
        if nxt not in resumed:
            continue
        newest = newest_before.get(nxt, 0)
        forced += max(0, last - newest)
        beyond += max(0, newest - (resumed[nxt] or 0))
    return forced, beyond


# --- watching the job ---------------------------------------------------------------------------

def folder_usage(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path``."""
    total = files = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
                files += 1
            except OSError:
                pass
    return total, files


def index_usage(home: Path) -> tuple[int, int]:
    total = files = 0
    for path in home.glob("jobs.db*"):
        total += path.stat().st_size
        files += 1
    return total, files


def proc_usage(pid: int) -> tuple[float, int, int] | None:
    """(RSS in MB, open file descriptors, threads) of ``pid``, None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return (int(fields["VmRSS"].split()[0]) / 1024.0, len(os.listdir(f"/proc/{pid}/fd")),
                int(fields["Threads"]))
    except (OSError, KeyError, ValueError):
        return None


def fd_kinds(pid: int) -> dict[str, int]:
    """What ``pid``'s open descriptors are: sockets, event polls, pipes, files (by folder)."""
    kinds: dict[str, int] = {}
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return kinds
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        kind = (target.split(":", 1)[0] if not target.startswith("/")
                else os.path.basename(os.path.dirname(target)) + "/")
        kinds[kind] = kinds.get(kind, 0) + 1
    return dict(sorted(kinds.items()))


def is_supervisor(pid: int, job_id: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return SUPERVISOR_MODULE.encode() in cmdline and job_id.encode() in cmdline


@dataclass
class Seen:
    """What the job's event log said so far, and what the bench saw of its checkpoints."""

    started: dict[int, float] = field(default_factory=dict)  # attempt -> when
    resumed: dict[int, int | None] = field(default_factory=dict)
    first_step: dict[int, float] = field(default_factory=dict)  # attempt -> epoch
    ended: dict[int, float] = field(default_factory=dict)
    failures: dict[int, dict] = field(default_factory=dict)
    notices: list[dict] = field(default_factory=list)
    committed: dict[int, float] = field(default_factory=dict)  # step -> first seen committed
    gone: dict[int, float] = field(default_factory=dict)
    present: set[int] = field(default_factory=set)
    superseded: set[int] = field(default_factory=set)
    supervisor_pid: int | None = None
    finished: str | None = None


class Watch:
    """One thread: the event log read as it grows, the checkpoint folder listed, the supervisor's
    RSS and files sampled, and each ended attempt archived and the folders measured."""

    def __init__(self, home: Path, job_id: str, ckpt_root: Path, archive: bool):
        self.home, self.job_id, self.ckpt_root, self.archive = home, job_id, ckpt_root, archive
        self.run_dir = home / "runs" / job_id
        self.node_tmp = Path(user_tmp_root(None, NODE_TMP)) / job_id
        self.seen = Seen()
        self.lock = threading.Lock()
        self.rss: list[tuple[float, float, int, int]] = []  # (time, MB, fds, threads)
        self.fds_at_start: dict[str, int] = {}
        self.fds_at_end: dict[str, int] = {}
        self.sizes: list[dict] = []  # at each attempt's start (after the one before was archived)
        self.archived: dict[int, dict] = {}
        self._offsets: dict[Path, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._tick(time.time())  # the last lines

    def _loop(self) -> None:
        last_sample = 0.0
        while not self._stop.wait(0.25):
            now = time.time()
            self._tick(now)
            if now - last_sample >= 2.0:
                last_sample = now
                self._sample(now)

    def _tick(self, now: float) -> None:
        with self.lock:
            for event in self._new_events():
                self._on_event(event)
            self._list_checkpoints(now)

    def _new_events(self) -> list[dict]:
        out = []
        for path in sorted((self.run_dir / "events").glob("*.jsonl")):
            offset = self._offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    chunk = f.read()
            except OSError:
                continue
            end = chunk.rfind(b"\n") + 1
            self._offsets[path] = offset + end
            for line in chunk[:end].splitlines():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return sorted(out, key=lambda e: e.get("at", 0.0))

    def _on_event(self, e: dict) -> None:
        kind, seen = e.get("kind"), self.seen
        attempt = e.get("attempt")
        if kind == "supervisor_started":
            seen.supervisor_pid = e.get("pid")
        elif kind == "attempt_started":
            seen.started[attempt] = e["at"]
            seen.resumed[attempt] = e.get("resume_step")
            if attempt > 0:
                self._attempt_over(attempt - 1)
        elif kind == "first_step":
            seen.first_step[attempt] = e.get("first_step_at") or e["at"]
        elif kind == "attempt_ended":
            seen.ended[attempt] = e["at"]
        elif kind == "failure_detected":
            seen.failures[attempt] = e
        elif kind == "notice" or kind in ("node_silent", "node_heard_again"):
            seen.notices.append(e)
        elif kind == "checkpoint_committed" and e.get("step") is not None:
            seen.committed.setdefault(int(e["step"]), e["at"])
        elif kind == "finished":
            seen.finished = e.get("state")

    def _attempt_over(self, attempt: int) -> None:
        """The next attempt started: archive this one's logs, then measure."""
        if self.archive:
            done = archive_attempt(self.run_dir, attempt)
            folder = self.run_dir / f"attempt-{attempt}"
            logs = sum(1 for p in folder.rglob("*") if p.name.endswith((".log", ".log.gz")))
            self.archived[attempt] = {**asdict(done), "logs_in_folder": logs,
                                      "folder": folder_usage(folder)}
        self.sizes.append(self.measure(attempt + 1))

    def measure(self, attempt: int) -> dict:
        run = folder_usage(self.run_dir)
        events = folder_usage(self.run_dir / "events")
        attempts = [folder_usage(p) for p in self.run_dir.glob("attempt-*")]
        losses = self.run_dir / "losses.jsonl"
        return {"attempt": attempt, "at": time.time(), "run": run, "events": events,
                "attempt_dirs": (sum(a[0] for a in attempts), sum(a[1] for a in attempts)),
                "losses": (losses.stat().st_size if losses.exists() else 0, 1),
                "index": index_usage(self.home), "node_tmp": folder_usage(self.node_tmp)}

    def _list_checkpoints(self, now: float) -> None:
        seen, present = self.seen, set()
        for folder in self.ckpt_root.glob("*/step-*"):
            try:
                step = int(folder.name.split("-", 1)[1])
            except ValueError:
                continue
            if (folder / "COMMITTED").exists():
                present.add(step)
                seen.committed.setdefault(step, now)
            elif (folder / "COMMITTED.superseded").exists():
                seen.superseded.add(step)
        for step in seen.committed:
            if step not in present and step not in seen.gone:
                seen.gone[step] = now
        seen.present = present

    def _sample(self, now: float) -> None:
        pid = self.seen.supervisor_pid
        if pid and is_supervisor(pid, self.job_id):
            usage = proc_usage(pid)
            if usage is not None:
                self.rss.append((now, *usage))
                kinds = fd_kinds(pid)
                if not self.fds_at_start and now - self.rss[0][0] >= 10.0:
                    self.fds_at_start = kinds
                if kinds:
                    self.fds_at_end = kinds


class Outside(threading.Thread):
    """The faults done from outside the ranks: ``pause`` and ``lost_node``, each at its time in its
    attempt (``after`` seconds from the attempt's first step, as the ranks count)."""

    def __init__(self, watch: Watch, plan: list[Planned]):
        super().__init__(daemon=True)
        self.watch, self.plan = watch, [f for f in plan if f.kind in OUTSIDE]
        self.done: dict[int, tuple[float, str]] = {}  # fault number -> (when, what happened)
        self.stop = threading.Event()

    def run(self) -> None:
        for fault in self.plan:
            first = self._first_step(fault.attempt)
            if first is None:
                self.done[fault.number] = (time.time(), "not done: its attempt never stepped")
                continue
            if self.stop.wait(max(0.0, first + fault.after - time.time())):
                return
            with self.watch.lock:
                over = fault.attempt in self.watch.seen.ended or self.watch.seen.finished
            if over:
                self.done[fault.number] = (time.time(), "not done: its attempt had ended")
                continue
            pids = job_processes(self.watch.job_id, fault.attempt)
            at = time.time()
            signal_pids(pids, signal.SIGSTOP)
            if fault.kind == "pause":
                self.stop.wait(fault.pause_s)
                signal_pids(pids, signal.SIGCONT)
                self.done[fault.number] = (at, f"paused {len(pids)} processes for "
                                               f"{fault.pause_s:g} s")
            else:
                self.done[fault.number] = (at, f"stopped {len(pids)} processes for good")
                self._until_ended(fault.attempt)
                signal_pids(job_processes(self.watch.job_id, fault.attempt), signal.SIGKILL)
                signal_pids(pids, signal.SIGCONT)  # none should be left: SIGKILL ends them
            log(f"fault {fault.number}: {fault.kind} in attempt {fault.attempt}: "
                f"{self.done[fault.number][1]}")

    def _first_step(self, attempt: int) -> float | None:
        while not self.stop.is_set():
            with self.watch.lock:
                seen = self.watch.seen
                if attempt in seen.first_step:
                    return seen.first_step[attempt]
                if seen.finished or max(seen.started, default=-1) > attempt:
                    return None
            self.stop.wait(0.2)
        return None

    def _until_ended(self, attempt: int) -> None:
        while not self.stop.is_set():
            with self.watch.lock:
                seen = self.watch.seen
                if (attempt in seen.ended or seen.finished
                        or max(seen.started, default=-1) > attempt):
                    return
            self.stop.wait(0.5)


# --- the runs -----------------------------------------------------------------------------------

def copy_demo(root: Path) -> Path:
    """The demo, unchanged, and beside it the wrapper that sets its steps."""
    shutil.copytree(REPO / "examples" / "demo", root / "demo",
                    ignore=shutil.ignore_patterns("checkpoints", "__pycache__"))
    (root / "demo" / "soak_train.py").write_text(WRAPPER)
    set_steps(root / "demo", NO_END)
    return root / "demo" / "job.yaml"


def set_steps(folder: Path, steps: int) -> None:
    tmp = folder / "soak_steps.tmp"
    tmp.write_text(f"{steps}\n")
    os.replace(tmp, folder / "soak_steps")


def job_sets(steps: int) -> list[str]:
    """What the soak changes of the demo: its steps and a short checkpoint interval, async saves."""
    return [f"args=[--steps, {steps}, --seq-len, 64]", f"checkpoint.interval={INTERVAL}",
            f"checkpoint.keep_last={KEEP_LAST}", "checkpoint.async_save=true"]


def submit(home: Path, job: Path, sets: list[str], *, wait: bool) -> dict:
    args = ["submit", "--cluster", "local", "--json", str(job)] + (["--wait"] if wait else [])
    for s in sets:
        args += ["--set", s]
    proc = cli(home, *args)
    out = proc.stdout.strip()
    if not out:
        raise SystemExit(f"submit failed: {proc.stderr}")
    return json.loads(out) if out.startswith("{") else {"id": out.split()[-1]}


def status_json(home: Path, job_id: str) -> dict:
    return json.loads(cli(home, "status", "--json", job_id).stdout)


def read_events(run_dir: Path) -> list[dict]:
    out = []
    for path in (run_dir / "events").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return sorted(out, key=lambda e: e.get("at", 0.0))


def calibrate(home: Path, job: Path, steps: int) -> dict:
    """The job with one crash halfway: its step time (saves included; the goodput's productive
    time less the steps trained again), its first start-up and its recovery (verdict to the next
    attempt's first step, from the warm standby)."""
    status = submit(home, job, [*job_sets(steps), "name=calibration",
                                f"env.FSDP_ORCH_FAULT=crash:step={steps // 2 + 5}:rank=1"],
                    wait=True)
    if status.get("state") != "SUCCEEDED":
        raise SystemExit(f"the calibration run ended {status.get('state')}: {status.get('reason')}")
    seconds = status["goodput"]["seconds"]
    events = read_events(Path(status["run_dir"]))
    started = {e["attempt"]: e["at"] for e in events if e["kind"] == "attempt_started"}
    first = {e["attempt"]: e["first_step_at"] for e in events if e["kind"] == "first_step"}
    failed = [e["at"] for e in events if e["kind"] == "failure_detected"]
    if 0 not in first or 1 not in first or not failed:
        raise SystemExit(f"the calibration run's events lack a first step or its failure: {events}")
    return {"steps": steps, "step_s": (seconds["productive"] + seconds["checkpoint"]) / steps,
            "startup_s": first[0] - started[0], "recovery_s": first[1] - failed[0],
            "wall_s": status["goodput"]["wall_s"]}


def latency(home: Path, job_id: str, runs: int = 5) -> dict:
    """Median wall seconds of ``status`` and ``status --json ID`` (fresh processes)."""
    out = {}
    for name, args in (("status", ("status",)), ("status_json_id", ("status", "--json", job_id))):
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            cli(home, *args)
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    return out


def steps_by_attempt(run_dir: Path) -> dict[int, set[int]]:
    found: dict[int, set[int]] = {}
    try:
        lines = (run_dir / "losses.jsonl").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        try:
            point = json.loads(line)
            found.setdefault(int(point["attempt"]), set()).add(int(point["step"]))
        except (ValueError, KeyError, TypeError):
            continue
    return found


def soak(root: Path, args: argparse.Namespace) -> dict:
    home = root / "home"
    job = copy_demo(root)
    log("calibration: 60 steps with a crash halfway")
    cal = calibrate(home, job, 60)
    log(f"calibration: {cal['step_s'] * 1000:.0f} ms a step with saves, start-up "
        f"{cal['startup_s']:.1f} s, crash to the next first step {cal['recovery_s']:.1f} s")
    shutil.rmtree(job.parent / "checkpoints", ignore_errors=True)
    span = args.minutes * 60.0
    min_after = max(6.0, 2 * INTERVAL * cal["step_s"] + 2.0)  # a new checkpoint in each attempt
    # Faults planned past the span, so that the attempt running when it is over still has one.
    plan = plan_faults(random.Random(args.seed), PLAN_SPANS * span, cal["recovery_s"], min_after)
    within = [f for f in plan if f.at <= span]
    tail_steps = max(3 * INTERVAL, math.ceil(TAIL_S / cal["step_s"]))
    faults = ";".join(f.env() for f in plan if f.kind in IN_RANKS)
    log(f"{len(within)} faults planned over {span:.0f} s ({len(plan)} in all); then the latest "
        f"checkpoint + {tail_steps} steps")
    t0 = time.time()
    job_id = submit(home, job, [*job_sets(NO_END), "name=soak", "script=soak_train.py",
                                f"env.FSDP_ORCH_FAULT={faults}"]
                    + [f"restart.max_restarts={args.max_restarts}"] * (args.max_restarts
                                                                         is not None),
                    wait=False)["id"]
    watch = Watch(home, job_id, job.parent / "checkpoints", archive=not args.no_archive)
    outside = Outside(watch, plan)
    outside.start()
    r: dict = {"job_id": job_id, "t0": t0, "calibration": cal, "minutes": args.minutes,
               "faults_wanted": args.faults,
               "seed": args.seed, "tail_steps": tail_steps, "plan": [asdict(f) for f in plan],
               "run_dir": str(watch.run_dir)}
    while 0 not in watch.seen.first_step and not watch.seen.finished:
        time.sleep(0.5)
    r["latency_start"] = latency(home, job_id)
    watch.sizes.insert(0, watch.measure(0))
    late_at = t0 + span * 0.9
    limit = t0 + 3 * span + 900
    while not watch.seen.finished and time.time() < limit:
        if "latency_late" not in r and time.time() >= late_at:
            r["latency_late"] = latency(home, job_id)
        # the attempt after this one ends the job, once both the time and the faults are done
        if time.time() >= t0 + span and faults_done(watch, outside) >= args.faults:
            with watch.lock:
                seen = watch.seen
                current = max(seen.started, default=0)
                # Both ranks of the next attempt must read the same steps: written only while
                # this attempt trains, never between its failure and the next one's start.
                live = (current in seen.first_step and current not in seen.failures
                        and current not in seen.ended)
                newest = max(seen.committed, default=0)
            if live and r.get("steps") != newest + tail_steps:
                r["steps"] = newest + tail_steps
                set_steps(job.parent, r["steps"])
        time.sleep(1.0)
    if not watch.seen.finished:
        log("the job did not end in time: cancelled")
        cli(home, "cancel", job_id)
    r["wall_s"] = time.time() - t0
    outside.stop.set()
    outside.join()
    time.sleep(1.0)
    watch.stop()
    r["latency_end"] = latency(home, job_id)
    r["status"] = status_json(home, job_id)
    r["outside"] = outside.done
    r["end_sizes"] = watch.measure(max(watch.seen.started, default=0) + 1)
    return collect(r, watch)


def faults_done(watch: Watch, outside: Outside) -> int:
    """Faults that happened so far: failures recorded and pauses done."""
    with watch.lock:
        failures = len(watch.seen.failures)
    return failures + sum(1 for _, what in list(outside.done.values()) if what.startswith("paused"))


def collect(r: dict, watch: Watch) -> dict:
    seen = watch.seen
    run_dir = watch.run_dir
    r["rss"] = watch.rss
    r["fds_start"], r["fds_end"] = watch.fds_at_start, watch.fds_at_end
    r["sizes"] = watch.sizes
    r["archived"] = watch.archived
    by_attempt = steps_by_attempt(run_dir)
    reached = {a: max(s) for a, s in by_attempt.items() if s and a in seen.failures}
    newest_before = {a: max([s for s, at in seen.committed.items() if at <= started], default=0)
                     for a, started in seen.started.items()}
    forced, beyond = forced_rework(reached, seen.resumed, newest_before)
    r["trained_twice"] = trained_twice(by_attempt)
    r["forced_rework"] = forced
    r["resumed_older_than_newest"] = beyond
    r["lost"] = checkpoints_lost(seen.committed, seen.gone, seen.present)
    r["superseded"] = sorted(seen.superseded)
    r["committed_seen"] = len(seen.committed)
    def rss_at(when: float | None) -> float | None:
        sample = next((s for s in watch.rss if when is not None and s[0] >= when), None)
        return None if sample is None else round(sample[1], 1)

    r["attempts"] = [{"attempt": a, "resumed": seen.resumed.get(a),
                      "supervisor_rss_mb": rss_at(seen.first_step.get(a)),
                      "reached": max(by_attempt.get(a, {0})),
                      "category": (seen.failures.get(a) or {}).get("category"),
                      "action": (seen.failures.get(a) or {}).get("action"),
                      "progressed": (seen.failures.get(a) or {}).get("progressed")}
                     for a in sorted(seen.started)]
    r["notices"] = [n.get("notice") or n.get("kind") for n in seen.notices]
    r["failure_times"] = sorted(e["at"] for e in seen.failures.values())
    r["recovery_s"] = {a: seen.first_step[a + 1] - e["at"] for a, e in seen.failures.items()
                       if a + 1 in seen.first_step}
    second = seen.first_step.get(1)
    r["rss_after_first_restart"] = next((s for s in watch.rss if second and s[0] >= second),
                                        None)
    return r


# --- the report ---------------------------------------------------------------------------------

def growth(sizes: list[dict], key: str) -> tuple[float, float, float]:
    """(bytes per attempt over the run, over its first half, over its second half)."""
    if len(sizes) < 3:
        return 0.0, 0.0, 0.0
    mid = len(sizes) // 2

    def per(a: dict, b: dict) -> float:
        return (b[key][0] - a[key][0]) / max(1, b["attempt"] - a["attempt"])
    return per(sizes[0], sizes[-1]), per(sizes[0], sizes[mid]), per(sizes[mid], sizes[-1])


def report(r: dict) -> list[tuple[str, str, bool | None]]:
    """(line, measured, target met or None)."""
    st = r["status"]
    rows: list[tuple[str, str, bool | None]] = []
    rows.append(("final state", f"{st['state']} after {st['attempts']} attempts, "
                 f"{r['wall_s'] / 60:.1f} min (asked {r['minutes']:g})",
                 st["state"] == "SUCCEEDED"))
    planned = r["plan"]
    kinds: dict[str, int] = {}
    for f in planned:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    failures = st.get("failures") or []
    rows.append(("faults planned (by kind)", f"{len(planned)}: " + ", ".join(
        f"{k} {n}" for k, n in sorted(kinds.items())), None))
    rows.append(("failures recorded", str(len(failures)), None))
    times = r["failure_times"]
    end_of_span = r["t0"] + r["minutes"] * 60
    pauses = [at for at, what in r["outside"].values() if what.startswith("paused")]
    injected = len(failures) + len(pauses)
    in_span = sum(1 for t in times + pauses if t <= end_of_span)
    want = r["faults_wanted"]
    rows.append(("faults done (failures + pauses)", f"{injected} in all (target >= {want:g}), "
                 f"{in_span} within the first {r['minutes']:g} min", injected >= want))
    unexpected = []
    for a in r["attempts"]:
        ending = [f["kind"] for f in planned
                  if f["attempt"] == a["attempt"] and f["kind"] != "pause"]
        if a["category"] and (not ending or a["category"] not in EXPECTED[ending[0]]):
            unexpected.append(f"attempt {a['attempt']}: {a['category']} "
                              f"(planned {ending[0] if ending else 'none'})")
    rows.append(("failures other than the planned ones", f"{len(unexpected)} "
                 + "; ".join(unexpected), None))
    if len(times) > 1:
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        rows.append(("time between failures (min / median / max)",
                     f"{min(gaps):.0f} / {statistics.median(gaps):.0f} / {max(gaps):.0f} s", None))
    for a in r["attempts"]:
        mine = [f"{f['kind']}@{f['after']:g}s" for f in planned if f["attempt"] == a["attempt"]]
        rows.append((f"  attempt {a['attempt']}",
                     f"resumed {a['resumed']}, reached {a['reached']}; "
                     f"planned {', '.join(mine) or '-'}; -> {a['category'] or 'ended'}"
                     f" / {a['action'] or '-'}"
                     + ("" if a["progressed"] is None else f", progressed {a['progressed']}")
                     + ("" if a["supervisor_rss_mb"] is None
                        else f"; supervisor {a['supervisor_rss_mb']} MB"),
                     None))
    for number, (at, what) in sorted(r["outside"].items(), key=lambda kv: int(kv[0])):
        rows.append((f"  outside fault {number}", f"{what} ({at - r['t0']:.0f} s in)", None))
    by_kind: dict[str, list[float]] = {}
    for a, seconds in r["recovery_s"].items():
        ending = [f["kind"] for f in planned if f["attempt"] == int(a) and f["kind"] != "pause"]
        by_kind.setdefault(ending[0] if ending else "unplanned", []).append(seconds)
    rows.append(("verdict -> next attempt's first step (median)", ", ".join(
        f"{k} {statistics.median(v):.1f} s" for k, v in sorted(by_kind.items())), None))
    good = st.get("goodput") or {}
    rows.append(("goodput (status --json)", f"{good.get('goodput_pct')}% of "
                 f"{good.get('wall_s', 0):.0f} s", None))
    rows.append(("  buckets (s)", ", ".join(f"{k} {v:.1f}"
                                          for k, v in (good.get("seconds") or {}).items()), None))
    rows += resource_rows(r)
    rows += growth_rows(r)
    rows += latency_rows(r)
    rows.append(("checkpoints lost (committed, gone, not by keep_last)",
                 f"{len(r['lost'])} {r['lost'] or ''} of {r['committed_seen']} committed seen"
                 + (f"; superseded {r['superseded']}" if r["superseded"] else ""),
                 not r["lost"] and not r["superseded"]))
    rows.append(("steps trained twice / forced by the last commit / beyond it",
                 f"{r['trained_twice']} / {r['forced_rework']} / "
                 f"{r['trained_twice'] - r['forced_rework']} (resumed older than the newest "
                 f"commit: {r['resumed_older_than_newest']})", None))
    return rows


def resource_rows(r: dict) -> list[tuple[str, str, bool | None]]:
    rss = r["rss"]
    if not rss:
        return [("supervisor RSS", "not sampled", False)]
    first = next((s for s in rss if s[0] >= r["rss"][0][0] + 10.0), rss[0])
    last, peak = rss[-1], max(s[1] for s in rss)
    grew = last[1] - first[1]
    attempts = len(r["attempts"])
    restarted = r["rss_after_first_restart"]
    since = ("" if restarted is None else
             f"; from the first restart on {last[1] - restarted[1]:+.1f} MB, "
             f"{(last[1] - restarted[1]) / max(1, attempts - 2):+.2f} MB an attempt")
    return [("supervisor RSS start -> end (peak)",
             f"{first[1]:.1f} -> {last[1]:.1f} MB ({peak:.1f}), growth {grew:+.1f} MB "
             f"(target <= {TARGET_RSS_MB:g}){since}", grew <= TARGET_RSS_MB),
            ("supervisor open files start -> end",
             f"{first[2]} -> {last[2]} over {attempts} attempts "
             f"({(last[2] - first[2]) / max(1, attempts - 1):+.1f} an attempt)", None),
            ("  by kind, start -> end", f"{r['fds_start']} -> {r['fds_end']}", None),
            ("supervisor threads start -> end", f"{first[3]} -> {last[3]}", None)]


def growth_rows(r: dict) -> list[tuple[str, str, bool | None]]:
    sizes, end = r["sizes"], r["end_sizes"]
    rows: list[tuple[str, str, bool | None]] = []
    names = {"run": "run folder", "attempt_dirs": "  of which attempt folders",
             "events": "  of which event log", "losses": "  of which losses.jsonl",
             "index": "index (jobs.db*)", "node_tmp": "node tmp folder (standby logs, beats)"}
    for key, name in names.items():
        total, first_half, second_half = growth(sizes, key)
        start = sizes[0][key] if sizes else (0, 0)
        hours = max(1e-9, (end["at"] - sizes[0]["at"]) / 3600) if sizes else 1e-9
        line = (f"{start[0] / 1024:.0f} KiB, {start[1]} files -> {end[key][0] / 1024:.0f} KiB, "
                f"{end[key][1]} files; {total / 1024:.1f} KiB/attempt "
                f"(halves {first_half / 1024:.1f}, {second_half / 1024:.1f}); "
                f"{(end[key][0] - start[0]) / hours / 2**20:.1f} MiB an hour")
        rows.append((name, line, None))
    archived = r["archived"]
    if archived:
        before = sum(a["bytes_before"] for a in archived.values())
        after = sum(a["bytes_after"] for a in archived.values())
        largest = max(archived.items(), key=lambda kv: kv[1]["folder"][0])
        bound = largest[1]["logs_in_folder"] * (HEAD_BYTES + TAIL_BYTES) + FIXED_BYTES
        rows.append(("largest ended attempt folder (archived)",
                     f"attempt {largest[0]}: {largest[1]['folder'][0] / 1024:.0f} KiB, "
                     f"{largest[1]['folder'][1]} files; bound {bound / 1024:.0f} KiB "
                     f"({largest[1]['logs_in_folder']} logs x "
                     f"{(HEAD_BYTES + TAIL_BYTES) // 1024} KiB + {FIXED_BYTES // 1024} KiB)",
                     largest[1]["folder"][0] <= bound))
        rows.append(("attempt logs archived (head+tail, gzip)",
                     f"{len(archived)} attempts, {before / 1024:.0f} KiB -> "
                     f"{after / 1024:.0f} KiB; bound {(HEAD_BYTES + TAIL_BYTES) // 1024} KiB a "
                     "log before gzip", None))
    return rows


def latency_rows(r: dict) -> list[tuple[str, str, bool | None]]:
    start, late, end = r["latency_start"], r.get("latency_late"), r["latency_end"]
    rows: list[tuple[str, str, bool | None]] = []
    for key, name in (("status", "status"), ("status_json_id", "status --json ID")):
        ratio = end[key] / start[key]
        shown = f"{start[key] * 1000:.0f} ms at the start"
        if late:
            shown += f", {late[key] * 1000:.0f} ms late in the run"
        shown += (f", {end[key] * 1000:.0f} ms at the end: {ratio:.2f}x "
                  f"(target <= {TARGET_LATENCY_RATIO:g}x)")
        rows.append((f"{name} latency (median of 5)", shown, ratio <= TARGET_LATENCY_RATIO))
    return rows


def print_rows(rows: list[tuple[str, str, bool | None]]) -> None:
    width = max(len(name) for name, _, _ in rows)
    verdict = {True: "pass", False: "MISS", None: ""}
    for name, measured, ok in rows:
        print(f"{name.ljust(width)}  {measured}  {verdict[ok]}".rstrip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="wall time to run faults for (then a clean tail)")
    parser.add_argument("--faults", type=int, default=None,
                        help="faults to have done before the clean tail (default: 2 a minute)")
    parser.add_argument("--seed", type=int, default=0, help="the faults' random seed")
    parser.add_argument("--no-archive", action="store_true",
                        help="leave ended attempts' logs as they are")
    parser.add_argument("--max-restarts", type=int, default=None,
                        help="restart.max_restarts (default: the user's default, no cap)")
    parser.add_argument("--keep", action="store_true", help="keep the run's folder and print it")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    if args.faults is None:
        args.faults = math.ceil(TARGET_FAULTS_PER_MINUTE * args.minutes)
    root = Path(tempfile.mkdtemp(prefix="fsdp-orch-soak-"))
    try:
        r = soak(root, args)
        if args.keep:
            (root / "soak.json").write_text(json.dumps(r, indent=1, default=str))
    finally:
        if not args.keep:
            for run in (root / "home" / "runs").glob("*"):  # what the jobs left on the node
                shutil.rmtree(Path(user_tmp_root(None, NODE_TMP)) / run.name, ignore_errors=True)
            shutil.rmtree(root, ignore_errors=True)
    rows = report(r)
    if args.json:
        print(json.dumps({**r, "rows": rows}, indent=1, default=str))
    else:
        print_rows(rows)
        if args.keep:
            print(f"kept: {root}")
    return 0 if all(ok is not False for *_, ok in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
