"""Which python runs what (docs/clusters/slurm.md, "Which python runs what").

The CLI (``submit``, ``status``, ``render``, ``doctor``; a ``pipx`` install with no torch) runs on
the submitting machine, and so does the supervisor of a job with no scheduler (local, SSH hosts,
TPU VMs). Everything on a node runs on the profile's ``python:``, in the environment with
``fsdp-orch[runtime]``: the ranks, the bootstrap loaded into them, each node's agent and warm
standby, and on SLURM the supervisor inside the allocation. None of it is ever run from, or
imports from, the CLI's own environment: the scripts fsdp-orch renders for a node name no path of
it, and find fsdp-orch where the ranks' python has it.

What a python has is asked without importing anything heavy: ``importlib.util.find_spec`` answers
in the time the interpreter takes to start (torch's import takes seconds). Stdlib only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

# (argv, timeout) -> (returncode, stdout, stderr), as observe.command.run answers (not imported:
# observe imports places)
Runner = Callable[[list[str], float], "tuple[int, str, str]"]

# What every python that runs ranks must import (``pip install 'fsdp-orch[runtime]'`` brings both).
RANKS_IMPORT = ("torch", "fsdp_orch")
INSTALL = "pip install 'fsdp-orch[runtime]'"
# Printed by a python asked what it has: each module of RANKS_IMPORT it finds ("torch fsdp_orch"),
# then fsdp_orch's version (read from its file: nothing of fsdp_orch is imported).
PROBE = ("import importlib.util as u, os\n"
         "names = [n for n in ('torch', 'fsdp_orch') if u.find_spec(n) is not None]\n"
         "print(' '.join(names) or '-')\n"
         "version = ''\n"
         "if 'fsdp_orch' in names:\n"
         "    folder = u.find_spec('fsdp_orch').submodule_search_locations[0]\n"
         "    try:\n"
         "        text = open(os.path.join(folder, 'vocab', 'version.py')).read()\n"
         "        version = text.split('__version__', 1)[1].split('\"')[1]\n"
         "    except (OSError, IndexError):\n"
         "        pass\n"
         "print(version or '-')\n")
PROBE_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class PythonHas:
    """What a python imports, as it said: None where it could not be asked (``said`` says why)."""

    python: str
    modules: frozenset[str] | None
    fsdp_orch_version: str | None = None
    said: str = ""

    @property
    def missing(self) -> list[str]:
        """What of RANKS_IMPORT it lacks (all of it where it could not be asked)."""
        have = self.modules or frozenset()
        return [name for name in RANKS_IMPORT if name not in have]


def parse_probe(python: str, returncode: int, stdout: str, stderr: str) -> PythonHas:
    """PROBE's answer. Pure."""
    lines = stdout.strip().splitlines()
    if returncode != 0 or len(lines) < 2:
        said = (stderr.strip().splitlines() or stdout.strip().splitlines() or ["no output"])[-1]
        return PythonHas(python, None, None, said[:300])
    names = frozenset(lines[-2].split()) - {"-"}
    version = lines[-1].strip()
    return PythonHas(python, names, None if version in ("", "-") else version)


def probe_argv(python: str) -> list[str]:
    return [python, "-c", PROBE]


def _run(argv: list[str], timeout: float) -> tuple[int, str, str]:
    try:
        # from / : ``-c`` puts the working folder first on the path, and a checkout of fsdp-orch
        # there would answer for the environment
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              timeout=timeout, check=False, stdin=subprocess.DEVNULL, cwd="/")
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout:g}s"
    except OSError as exc:
        return (127 if isinstance(exc, FileNotFoundError) else 126), "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def what_python_has(python: str, run: Runner = _run) -> PythonHas:
    """Ask ``python`` (a path, or a name on this machine's PATH) what it imports."""
    # a relative path is this folder's (the probe runs from /)
    here = os.path.abspath(os.path.expanduser(python)) if "/" in python else python
    returncode, stdout, stderr = run(probe_argv(here), PROBE_TIMEOUT_S)
    if returncode == 127:
        return PythonHas(python, None, None, "not found")
    return parse_probe(python, returncode, stdout, stderr)


def executable_here(python: str) -> str | None:
    """``python`` as a file this machine can run (a name looked up on PATH), or None."""
    found = python if "/" in python else shutil.which(python)
    if not found:
        return None
    found = os.path.expanduser(found)
    return found if os.path.isfile(found) and os.access(found, os.X_OK) else None


def set_python(where: str = "the cluster profile") -> str:
    return f"set python: in {where} to the python of the environment your training uses"


def ranks_python_problem(has: PythonHas, where: str = "the cluster profile",
                         cli_own: bool = False) -> str | None:
    """Why ``has.python`` cannot run the ranks, in one line with its fix; None when it can.
    ``where``: the profile to set ``python:`` in; ``cli_own``: it is the CLI's own python. Pure."""
    python = has.python
    if has.modules is None:
        return (f"the ranks' python {python} could not be asked what it imports ({has.said}): "
                f"{set_python(where)}, with {INSTALL} in it")
    missing = has.missing
    if not missing:
        return None
    own = " (the CLI's own)" if cli_own else ""
    fix = (f"{set_python(where)}, or add torch to the CLI's environment (pipx inject fsdp-orch "
           "torch)" if cli_own and missing == ["torch"] else
           f"install it there ({python} -m {INSTALL}), or {set_python(where)}")
    return f"the ranks' python {python}{own} cannot import {' or '.join(missing)}: {fix}"


def is_this_python(python: str) -> bool:
    """Whether ``python`` is the interpreter running this CLI."""
    found = executable_here(python)
    if found is None or not sys.executable:
        return False
    # not samefile: every venv's python is a link to the same interpreter
    return os.path.abspath(found) == os.path.abspath(sys.executable)


__all__ = ["INSTALL", "PROBE", "RANKS_IMPORT", "PythonHas", "executable_here", "is_this_python",
           "parse_probe", "probe_argv", "ranks_python_problem", "set_python", "what_python_has"]
