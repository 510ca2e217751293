"""The XLA path for real: torch_xla 2.9.0 on its CPU PJRT device, in the second environment
(``.venv-xla``, made by ``scripts/setup-xla.sh``). pytest runs in the main environment; the jobs
run the XLA environment's python, named by a local cluster profile.

``scripts/test.sh`` starts the XLA environment's setup in the background before pytest, so the
download overlaps the rest of the suite; the first test here waits for it (the setup script holds
a lock while it works, and a second call finds the environment made)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import xla_env
from cli_harness import Cli, make_cli

# test_xla_fsdp imports SMALL_DEMO from here
from xla_env import SMALL_DEMO, XLA_DEVICES  # noqa: F401

xla_python = xla_env.xla_python  # the session fixture, shared with tests/ssh
SPMD_ENV = ["--set", "env.PJRT_DEVICE=CPU", "--set", f"env.CPU_NUM_DEVICES={XLA_DEVICES}"]
# XLA's CPU compiler without LLVM's optimizations: compiling dominates a short XLA run (a step's
# graph twice an attempt, the first step's with the optimizer's new state, then the rest's, and the
# saves' small ones), and at level 0 it takes a fifth of the CPU time (measured: 42 s -> 8 s of
# compiling for the demo at test size, at load 6-9; the same losses to the last digit). What the
# tests assert (the plan, the failures, a resume that repeats the attempt before's losses) is not
# about the CPU code's speed. PJRT's CPU client cannot reload a persistent cache's executables, so
# each attempt compiles anew.
XLA_FLAGS = "--xla_backend_optimization_level=0"


def xla_profile(python: Path, name: str = "xla-cpu") -> str:
    return (f"# torch_xla on the CPU PJRT device (one process drives all its devices)\n"
            f"kind: local\ndevice: cpu\npython: {python}\nprocs_per_node: 1\n"
            "env:\n  OMP_NUM_THREADS: \"2\"\n"
            f"  XLA_FLAGS: \"{XLA_FLAGS}\"\n")


@pytest.fixture
def xla_cli(tmp_path: Path, xla_python: Path) -> Iterator[Cli]:
    """A CLI whose home has the ``xla-cpu`` local profile running the XLA environment's python."""
    cli = make_cli(tmp_path)
    clusters = cli.home / "clusters"
    clusters.mkdir(parents=True)
    (clusters / "xla-cpu.yaml").write_text(xla_profile(xla_python))
    yield cli
