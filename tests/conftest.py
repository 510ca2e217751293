"""Shared fixtures. ``torchrun``: run a training script under real torchrun with the FSDP_ORCH_*
environment and job.json that fsdp-orch's planner produces for a local job."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import secret_checks
from cli_harness import SMALL_DEMO, Cli, copy_demo, copy_unchanged, make_cli
from status_is_fold import CHECKED, CLIS, STRAGGLERS_NAMED, mismatches

pytest_plugins = [
    "suite_times",  # FSDP_ORCH_TEST_TIMES=FILE: where the suite's time goes
    "side_by_side",  # how pytest-xdist workers share the tests
]

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo" / "train.py"


@dataclass
class TorchrunRun:
    """One attempt of a job: where it lives and (once finished) how it ended."""

    tmp: Path
    run_dir: Path
    checkpoint_dir: Path
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def result(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "result.json").read_text())

    def ok(self) -> TorchrunRun:
        """Assert the run succeeded, showing its output when not."""
        assert self.returncode == 0, (f"exit {self.returncode}\n{self.stdout[-2000:]}"
                                      f"\n{self.stderr[-4000:]}")
        return self

    def kill(self) -> None:
        """SIGKILL torchrun and every process under it (its workers run in sessions of their own,
        so killing torchrun's process group alone would orphan them, holding our pipes open)."""
        if self.proc is None:
            return
        for pid in [self.proc.pid, *_descendants(self.proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@dataclass
class Torchrun:
    tmp: Path
    started: list[TorchrunRun] = field(default_factory=list)
    demo: Path = DEMO
    small: tuple[str, ...] = tuple(SMALL_DEMO)

    def prepare(self, args: list[str] | None = None, *, script: Path = DEMO, attempt: int = 0,
                resume: str | None = None, fault: str | None = None, nproc: int = 2,
                name: str = "t", env: dict[str, str] | None = None, **spec: Any) -> TorchrunRun:
        """Plan a local job (``spec``: job.yaml fields such as ``fsdp={...}``) like fsdp-orch does,
        write its job.json, and return the attempt ready to start."""
        from fsdp_orch.backends.local import KIND, LocalProfile
        from fsdp_orch.jobspec.schema import JobSpec
        from fsdp_orch.launch.plan import make_plan, spec_json
        from fsdp_orch.launch.plan_inputs import PlanContext

        job = JobSpec.model_validate({"name": name, "script": str(script), "procs_per_node": nproc,
                                      **spec})
        ctx = PlanContext(job_id=name, attempt=attempt, run_root=str(self.tmp / "home"),
                          job_dir=str(self.tmp), resume_from=resume)
        plan = make_plan(job, LocalProfile(kind="local", device="cpu"), "local", ctx, KIND)
        Path(plan.attempt_dir).mkdir(parents=True, exist_ok=True)
        Path(plan.spec_path).write_text(spec_json(plan))
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
        full_env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
        full_env.update(dict(plan.env))
        if fault:
            full_env["FSDP_ORCH_FAULT"] = fault
        full_env.update(env or {})
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                str(nproc), str(script), *(args or [])]
        return TorchrunRun(self.tmp, Path(plan.run_dir), Path(plan.checkpoint_dir), argv, full_env)

    def start(self, run: TorchrunRun) -> TorchrunRun:
        run.proc = subprocess.Popen(run.argv, cwd=self.tmp, env=run.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.started.append(run)
        return run

    def run(self, args: list[str] | None = None, *, timeout: float = 180,
            **kwargs: Any) -> TorchrunRun:
        """Prepare, run to the end (killing the process group after ``timeout``), collect output."""
        return self.finish(self.start(self.prepare(args, **kwargs)), timeout=timeout)

    def finish(self, run: TorchrunRun, *, timeout: float = 180) -> TorchrunRun:
        """A started run to its end (its process group killed after ``timeout``), its output."""
        assert run.proc is not None
        try:
            run.stdout, run.stderr = run.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            run.kill()
            run.stdout, run.stderr = run.proc.communicate()
            raise AssertionError(
                f"torchrun still running after {timeout}s:\n{run.stderr[-3000:]}") from None
        run.returncode = run.proc.returncode
        return run


@pytest.fixture
def torchrun(tmp_path: Path):
    """Run scripts under real torchrun (2 CPU ranks by default); kills leftovers at the end."""
    runner = Torchrun(tmp_path)
    yield runner
    for run in runner.started:
        run.kill()


@pytest.fixture(scope="module")
def module_torchrun(tmp_path_factory: pytest.TempPathFactory):
    """Like ``torchrun`` but shared by a module's tests (a baseline run computed once)."""
    runner = Torchrun(tmp_path_factory.mktemp("torchrun"))
    yield runner
    for run in runner.started:
        run.kill()


# --- the fsdp-orch CLI as a user runs it: tests/cli_harness.py ---------------------------------

@pytest.fixture
def other_account() -> tuple[int, int]:
    """(uid, gid) of an unprivileged second account, created when absent (secret_checks)."""
    return secret_checks.other_account()


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder every account can write, like /tmp or /scratch (mode 1777, root's; outside
    pytest's 0700 tmp)."""
    path = Path(tempfile.mkdtemp(prefix="fsdp-orch-shared-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return make_cli(tmp_path)


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


@pytest.fixture(scope="module")
def module_cli_and_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Cli, Path]:
    """For a reference run shared by a module's tests."""
    base = tmp_path_factory.mktemp("shared")
    return make_cli(base), copy_demo(base)


# --- the unchanged third-party scripts of examples/unchanged ------------------------------------

def ranks_on(cli: Cli) -> Cli:
    """With ``FSDP_ORCH_TEST_RANKS_PYTHON`` set (another environment's python, e.g. .venv-xla's
    torch 2.9.0, the oldest the runtime extra allows), the CLI's local profile runs the ranks on it:
    the unchanged scripts checked on another torch than the CLI's."""
    python = os.environ.get("FSDP_ORCH_TEST_RANKS_PYTHON")
    if python:
        (cli.cwd / "clusters").mkdir(exist_ok=True)
        (cli.cwd / "clusters" / "local.yaml").write_text(f"kind: local\npython: '{python}'\n")
    return cli


@pytest.fixture
def unchanged(tmp_path: Path):
    """``unchanged(name)``: a CLI with its own home and a copy of examples/unchanged/<name>."""
    return lambda name: (ranks_on(make_cli(tmp_path)), copy_unchanged(tmp_path, name))


@pytest.fixture(scope="module")
def module_unchanged(tmp_path_factory: pytest.TempPathFactory):
    """Like ``unchanged``, shared by a module's tests (one run that several tests read)."""
    def make(name: str) -> tuple[Cli, Path]:
        base = tmp_path_factory.mktemp(name)
        return ranks_on(make_cli(base)), copy_unchanged(base, name)
    return make


_FIRST_CLI = pytest.StashKey[int]()


def _is_cli(value: object) -> bool:
    return all(hasattr(value, name) for name in ("home", "prefix", "run"))


def _clis_used(values: list[object]) -> list[Any]:
    """The CLIs among a test's fixture values: a Cli, one in a tuple or list, or an object's
    ``cli``."""
    found = []
    for value in values:
        for candidate in (value, *(value if isinstance(value, (tuple, list)) else ()),
                          getattr(value, "cli", None)):
            if _is_cli(candidate):
                found.append(candidate)
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):  # type: ignore[no-untyped-def]
    item.stash[_FIRST_CLI] = len(CLIS)
    return (yield)


@pytest.fixture(autouse=True)
def _umask_kept() -> Any:
    """Each test starts with the umask the session started with: fsdp-orch's CLI, run in process,
    sets 077 for good, and a test after it on the same worker made 0700 folders where it asked for
    0755 (and the other account's files came out 0600)."""
    os.umask(SESSION_UMASK)
    yield
    os.umask(SESSION_UMASK)


def _session_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


SESSION_UMASK = _session_umask()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    """After a test passed, while its fixtures are still up (a login node's namespace, hosts): for
    every CLI (home) it made or used, every job ``status --json`` lists equals ``fold(events)`` of
    the job's own logs (tests/status_is_fold.py)."""
    result = yield
    made = CLIS[item.stash.get(_FIRST_CLI, len(CLIS)):]
    used = _clis_used(list(getattr(item, "funcargs", {}).values()))
    seen: set[int] = set()
    STRAGGLERS_NAMED.clear()
    for cli in [*made, *used]:
        if id(cli) in seen or id(cli) in CHECKED:
            continue
        seen.add(id(cli))
        wrong = mismatches(cli)
        if wrong:
            pytest.fail("status --json is not fold(events) for:\n" + "\n".join(wrong),
                        pytrace=False)
    if STRAGGLERS_NAMED and item.get_closest_marker("straggler") is None:
        pytest.fail("a straggler was named in a run that slowed no rank: "
                    + "; ".join(f"{job}: {message}" for job, message in STRAGGLERS_NAMED),
                    pytrace=False)
    return result


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/unit is marked ``unit``: ``scripts/test.sh --quick`` runs those and
    the few marked ``quick`` (one short real job per launcher)."""
    unit = REPO / "tests" / "unit"
    for item in items:
        if Path(str(item.fspath)).is_relative_to(unit):
            item.add_marker(pytest.mark.unit)
