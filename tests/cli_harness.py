"""The fsdp-orch CLI as a user runs it: a subprocess with its own FSDP_ORCH_HOME (optionally inside
another mount namespace), and private copies of the examples. Shared by every conftest."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The demo at test size: a step takes a quarter of the default model's time on 2 CPU cores (31 ms
# against 127 ms, two ranks). Every demo job of the suite uses it unless the model is what it tests.
SMALL_DEMO = ["--vocab", "64", "--dim", "32", "--layers", "2", "--heads", "2", "--seq-len", "16",
              "--batch-size", "16", "--lr", "0.01"]
# A demo job that runs until the test stops it: sleeping between steps, it leaves the cores to the
# other tests while it waits (at full speed it kept both cores busy for the whole wait).
UNTIL_STOPPED = ("100000", "--sleep-per-step", "0.1")


@dataclass
class Cli:
    home: Path
    cwd: Path
    prefix: tuple[str, ...] = ()  # e.g. nsenter into a login node's mount namespace

    def __post_init__(self) -> None:
        from status_is_fold import CLIS

        CLIS.append(self)  # after each test, its jobs' status is checked against their events

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
        env["FSDP_ORCH_HOME"] = str(self.home)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def run(self, *args: str, timeout: float = 600, check: bool = False,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.run([*self.prefix, sys.executable, "-m", "fsdp_orch", *args],
                              cwd=self.cwd, env=env or self.env, capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"fsdp-orch {' '.join(args)} exited {proc.returncode}\n"
                                 f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    def status(self, job_id: str) -> dict:
        return json.loads(self.run("status", job_id, "--json", check=True).stdout)

    def wait_until(self, job_id: str, predicate, timeout: float = 300, what: str = "") -> dict:
        """Polls ``status --json``: every 0.25 s at first, then less often, up to once a second
        (each poll is a process start; a fixed 0.5 s made status the suite's most frequent
        process, about a tenth of its CPU)."""
        deadline = time.monotonic() + timeout
        pause = 0.25
        while time.monotonic() < deadline:
            status = self.status(job_id)
            if predicate(status):
                return status
            time.sleep(pause)
            pause = min(1.0, pause * 1.5)
        raise AssertionError(f"timed out waiting for {what or predicate}: {self.status(job_id)}")


def make_cli(base: Path) -> Cli:
    """A CLI with its own FSDP_ORCH_HOME under ``base``."""
    work = base / "work"
    work.mkdir(parents=True, exist_ok=True)
    return Cli(home=base / "home", cwd=work)


def copy_demo(base: Path) -> Path:
    """A private copy of examples/demo under ``base`` (its checkpoints land beside it); its
    job.yaml."""
    target = base / "demo"
    shutil.copytree(REPO / "examples" / "demo", target,
                    ignore=shutil.ignore_patterns("checkpoints", "__pycache__", "result.json"))
    return target / "job.yaml"


def slow_in_attempt(attempt: int, seconds: float, ranks: int = 2) -> list[str]:
    """``FSDP_ORCH_FAULT`` specs: every rank sleeps ``seconds`` a step in ``attempt`` alone (the
    runtime's ``slow`` fault), so that it is still training when a test interrupts it, no rank is a
    straggler, and the other attempts train at full speed (the demo's ``--sleep-per-step`` slept in
    every attempt: waiting that tested nothing)."""
    return [f"slow:step=0:rank={rank}:seconds={seconds:g}:attempt={attempt}"
            for rank in range(ranks)]


def demo_args(steps: int | str, *extra: object) -> str:
    """``args=[...]`` for ``--set``: the demo at test size, ``steps`` steps, then ``extra``."""
    return "args=" + json.dumps(["--steps", str(steps), *map(str, extra), *SMALL_DEMO])


def copy_unchanged(base: Path, name: str) -> Path:
    """A private copy of examples/unchanged/<name> under ``base`` (outputs land beside it); its
    job.yaml."""
    target = base / name
    shutil.copytree(REPO / "examples" / "unchanged" / name, target,
                    ignore=shutil.ignore_patterns("out", "ckpt", "__pycache__", "*.pt"))
    return target / "job.yaml"


def why(status: dict) -> str:  # type: ignore[type-arg]
    """What a job that did not succeed left behind: its reason, failures and supervisor log."""
    log = Path(status["run_dir"]) / "supervisor.log"
    tail = log.read_text(errors="replace")[-3000:] if log.is_file() else "(no supervisor log)"
    return f"{status['state']}: {status.get('reason')}\nfailures: {status['failures']}\n{tail}"


def job_events(cli: Cli, job_id: str) -> list[dict]:
    """The job's event log as ``fsdp-orch events --json`` prints it, in order."""
    return [json.loads(line)
            for line in cli.run("events", job_id, "--json", check=True).stdout.splitlines()]


def attempt_log(run_dir: Path | str, attempt: int, name: str) -> str:
    """A log of an attempt in the run folder, read through its archive once the attempt has ended
    and the job restarted (``<name>.gz``; the tests' logs are under the size that trims them)."""
    path = Path(run_dir) / f"attempt-{attempt}" / name
    if path.is_file():
        return path.read_text(errors="replace")
    return gzip.decompress(path.with_name(name + ".gz").read_bytes()).decode(errors="replace")


def step_losses(console: str) -> dict[int, str]:
    """The demo's ``step=N loss=L`` lines (rank 0 prints one a step, behind torchrun's
    ``[default0]:`` where torchrun tees the ranks' output), as printed."""
    return {int(step): loss for step, loss in re.findall(
        r"^(?:\[default0\]:)?step=(\d+) loss=(\S+)$", console, re.M)}


def repeated(before: dict[int, str], after: dict[int, str]) -> list[int]:
    """The steps two attempts both trained (``step_losses`` of each), whose printed losses must be
    equal: a resumed attempt that restored the weights, the optimizer's state and the RNG states
    exactly repeats them on a deterministic backend (the demo's batches depend on the step
    alone)."""
    again = sorted(set(before) & set(after))
    assert [before[s] for s in again] == [after[s] for s in again], (before, after)
    return again


def hang_windows(cli: Cli, job_id: str, attempt: int = 0) -> list[dict]:
    """The hang windows the supervisor recorded for ``attempt`` (``hang_window`` events), in
    order."""
    return [e for e in job_events(cli, job_id)
            if e.get("kind") == "hang_window" and e.get("attempt") == attempt]


def notices(cli: Cli, job_id: str, name: str) -> list[dict]:
    """The supervisor's notices called ``name`` (``stacks``, ``node_silent``...), in order."""
    return [e for e in job_events(cli, job_id)
            if e.get("kind") == "notice" and e.get("notice") == name]


def culprit_leads(evidence: str | None, rank: int) -> bool:
    """A hang's evidence leads with the hung rank, named as outside a collective (issue 26)."""
    head = (evidence or "").split(";")[0]
    return head.startswith(f"rank {rank} stuck in ") and "(not in a collective" in head


def standby_starts(attempt_dir: Path) -> list[str]:
    """How each node's launcher of an attempt started its ranks from the warm standby, as it said it
    in the node's console (``standby.launch``): one entry a node that started warm."""
    return [line.split("started from the standby (", 1)[1].rsplit(")", 1)[0]
            for log in sorted(attempt_dir.rglob("*.log"))
            for line in log.read_text(errors="replace").splitlines()
            if "rank(s) started from the standby (" in line]


def iso_epoch(iso: str) -> float:
    """``2026-01-01T03:00:00.123Z`` (status --json's times) to seconds since the epoch."""
    import calendar

    return calendar.timegm(time.strptime(iso[:19], "%Y-%m-%dT%H:%M:%S")) + float(iso[19:-1] or 0)


def kill_supervisor(cli: Cli, job_id: str, within: float = 10.0) -> int:
    """SIGKILL the job's supervisor (the pid the index records) and wait up to ``within`` seconds
    for it to be gone, as a submitting machine's process that died; its pid."""
    import signal

    from fsdp_orch.observe.proctree import pid_alive
    from fsdp_orch.record.store import Store

    pid = Store(cli.home / "jobs.db").job(job_id).supervisor_pid
    assert pid, f"job {job_id} records no supervisor"
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + within
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return pid


def check_goodput(cli: Cli, status: dict) -> dict:
    """A finished job's goodput, as ``status --json``, ``status ID`` and ``report`` give it: the
    buckets add up to the wall time (submission to end) within 1%, the goodput is between 0 and
    100, the table says it and the page holds the same figures. Returns the breakdown."""
    g = status["goodput"]
    wall = iso_epoch(status["ended_at"]) - iso_epoch(status["created_at"])
    assert abs(g["wall_s"] - wall) <= 0.002, (g["wall_s"], wall)
    assert abs(sum(g["seconds"].values()) - g["wall_s"]) <= 0.01 * g["wall_s"], g
    assert 0 < g["goodput_pct"] < 100, g
    line = [x for x in cli.run("status", status["id"], check=True).stdout.splitlines()
            if x.startswith("goodput: ")]
    assert line and line[0].startswith(f"goodput: {g['goodput_pct']:.1f}% of "), line
    page = cli.run("report", status["id"], check=True).stdout.strip()
    text = (cli.cwd / page).read_text()
    for bucket, seconds in g["seconds"].items():
        assert f"data-bucket='{bucket}' data-seconds='{seconds!r}'" in text, bucket
    return g


def hf_trainer_hang_on_two_nodes(cli: Cli, cluster: str, base: Path, *, max_steps: int = 100,
                                 save_steps: int = 40, hang_step: int = 90) -> tuple[dict, Path]:
    """examples/unchanged/hf_trainer (transformers' Trainer, never importing fsdp_orch), one rank on
    each of 2 nodes of ``cluster``, rank 1 hanging at ``hang_step`` (after a save), submitted with
    ``--wait``: checks the hang was named on rank 1 and the job SUCCEEDED at ``max_steps``; (its
    status, its job file)."""
    import yaml

    job = copy_unchanged(base, "hf_trainer")
    args = [str(a) for a in yaml.safe_load(job.read_text())["args"]]
    # the hang comes after a save; the restart resumes there and trains the last steps
    for flag, value in (("--max_steps", max_steps), ("--save_steps", save_steps)):
        args[args.index(flag) + 1] = str(value)
    proc = cli.run("submit", "--cluster", cluster, "--wait", "--json", str(job), "--set", "nodes=2",
                   "--set", "procs_per_node=1", "--set", "args=" + json.dumps(args),
                   "--set", "watch.heartbeat_timeout=8s", "--set", "watch.startup_timeout=120s",
                   "--set", "restart.backoff.initial=1s", "--set",
                   f"env.FSDP_ORCH_FAULT=hang:step={hang_step}:rank=1", timeout=600)
    status = json.loads(proc.stdout)
    assert status["state"] == "SUCCEEDED", status
    [failure] = status["failures"]
    assert failure["category"] == "hang" and failure["action"] == "restart", failure
    assert "rank 1 stuck at train.py:" in failure["evidence"], failure["evidence"]
    assert culprit_leads(failure["evidence"], 1), failure["evidence"]
    state = json.loads((job.parent / "out" / "trainer_state.json").read_text())
    assert state["global_step"] == max_steps, state
    return status, job
