"""Fixtures for end-to-end tests that drive the real CLI: a private FSDP_ORCH_HOME, a copy of an
example, and a helper that runs ``fsdp-orch`` as a user would (a subprocess)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Cli:
    home: Path
    cwd: Path

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
        env["FSDP_ORCH_HOME"] = str(self.home)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def run(self, *args: str, timeout: float = 600, check: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "fsdp_orch", *args], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"fsdp-orch {' '.join(args)} exited {proc.returncode}\n"
                                 f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    def status(self, job_id: str) -> dict:
        return json.loads(self.run("status", job_id, "--json", check=True).stdout)

    def wait_until(self, job_id: str, predicate, timeout: float = 300, what: str = "") -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status(job_id)
            if predicate(status):
                return status
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what or predicate}: {self.status(job_id)}")


def make_cli(base: Path) -> Cli:
    """A CLI with its own FSDP_ORCH_HOME under ``base``."""
    work = base / "work"
    work.mkdir(parents=True, exist_ok=True)
    return Cli(home=base / "home", cwd=work)


def copy_demo(base: Path) -> Path:
    """A private copy of examples/demo under ``base`` (its checkpoints land beside it); its job.yaml."""
    target = base / "demo"
    shutil.copytree(REPO / "examples" / "demo", target,
                    ignore=shutil.ignore_patterns("checkpoints", "__pycache__", "result.json"))
    return target / "job.yaml"


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
