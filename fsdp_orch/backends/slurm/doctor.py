"""What ``fsdp-orch doctor --cluster`` checks on a SLURM cluster: the commands, the accounting, the
nodes' torch and fsdp-orch (the profile's python, which runs everything in the allocation), and
that the nodes see the run folder."""

from __future__ import annotations

import os
import shutil

from fsdp_orch.backends.slurm.profile import SlurmProfile
from fsdp_orch.observe.command import Runner
from fsdp_orch.places.home import home_dir
from fsdp_orch.places.private import ensure_private_root
from fsdp_orch.record.run_roots import shared_run_root
from fsdp_orch.vocab.checks import (
    MIN_TORCH_TEXT,
    RANKS_NEED,
    TORCH_VERSION,
    Check,
    sacct_fix,
    torch_too_old,
)
from fsdp_orch.vocab.errors import InputError

COMMANDS = ("sbatch", "srun", "squeue", "sacct", "scontrol", "scancel")


def one_node_step(profile: SlurmProfile) -> list[str]:
    """``srun`` for a one-task step of at most a minute, in the profile's partition and account."""
    argv = ["srun", "--nodes=1", "--ntasks=1", "--time=1"]
    for option in ("partition", "account", "qos"):
        value = getattr(profile, option)
        if value:
            argv.append(f"--{option}={value}")
    return argv


# What a node's python says: its fsdp-orch (found, then its version read; "-": none), then its
# torch's version (imported: the same check as the ranks' own import).
FSDP_ORCH_LINE = "fsdp_orch "
NODE_PROBE = ("import importlib.util as u\n"
              "v = '-'\n"
              "if u.find_spec('fsdp_orch') is not None:\n"
              "    try:\n"
              "        from fsdp_orch.vocab.version import __version__ as v\n"
              "    except Exception:\n"
              "        v = '?'\n"
              f"print({FSDP_ORCH_LINE!r} + v, flush=True)\n"
              f"{TORCH_VERSION}\n")


def fsdp_orch_on_the_nodes(python: str, said: list[str]) -> Check:
    """The nodes' fsdp-orch (``NODE_PROBE``'s first line): the supervisor in the allocation, the
    node agents and the ranks' bootstrap import it from the profile's python, never from the
    login node's CLI; the same version as this CLI's."""
    from fsdp_orch.vocab.version import __version__

    name = "fsdp-orch on the nodes"
    there = next((line[len(FSDP_ORCH_LINE):].strip() for line in said
                  if line.startswith(FSDP_ORCH_LINE)), None)
    fix = (f"{python} -m pip install 'fsdp-orch[runtime]=={__version__}' in the environment "
           "the nodes run (on the shared filesystem), or set python: in the profile to a "
           "python that has it")
    if there is None:
        return Check(name, False, f"{python} on a node did not answer (see torch on the nodes)",
                     fix)
    if there == "-":
        return Check(name, False, f"{python} on a node cannot import fsdp_orch: the supervisor in "
                     "the allocation, the node agents and the ranks' bootstrap run from it", fix)
    if there != __version__:
        return Check(name, False, f"fsdp-orch {there} on the nodes ({python}), {__version__} "
                     "here", fix)
    return Check(name, True, f"{python}: fsdp-orch {there}, as here")


def slurm_checks(profile: SlurmProfile, torch_version: str | None, run: Runner) -> list[Check]:
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        return [Check("SLURM commands", False, f"not on PATH: {', '.join(missing)}",
                      "load the SLURM client (module load slurm) or add its bin folder to PATH")]
    checks = [Check("SLURM commands", True, ", ".join(COMMANDS))]
    accounting = run(["sacct", "--noheader", "-X", "-S", "now-1minutes", "-o", "JobID"], 30.0)
    if accounting.returncode != 0:
        said = (accounting.stderr or accounting.stdout).strip()
        checks.append(Check("sacct answers", False, said[:300], sacct_fix(said)))
    else:
        checks.append(Check("sacct answers", True, "the accounting database answers"))
    nodes = run([*one_node_step(profile), profile.python, "-c", NODE_PROBE], 300.0)
    node_lines = nodes.stdout.strip().splitlines()
    version = (node_lines[-1] if nodes.returncode == 0 and node_lines
               and not node_lines[-1].startswith(FSDP_ORCH_LINE) else None)
    if version is None:
        checks.append(Check("torch on the nodes", False, f"{profile.python} on a node: "
                            f"{(nodes.stderr.strip().splitlines() or ['no output'])[-1][:300]}",
                            "set python: in the profile to an interpreter the nodes have, "
                            "with torch and fsdp-orch[runtime] (a venv on the shared "
                            "filesystem)"))
    elif torch_too_old(version):
        checks.append(Check("torch on the nodes", False,
                            f"nodes have torch {version}, older than "
                            + MIN_TORCH_TEXT,
                            f"{RANKS_NEED}; or set python: in the profile to such an environment"))
    else:
        checks.append(Check("torch on the nodes", True, f"{profile.python}: torch {version}"))
    checks.append(fsdp_orch_on_the_nodes(profile.python, node_lines))
    runs = os.path.join(shared_run_root(profile.shared_dir) if profile.shared_dir else home_dir(),
                        "runs")
    where = "shared_dir in the profile" if profile.shared_dir else "FSDP_ORCH_HOME"
    try:
        ensure_private_root(runs, above=[os.path.dirname(runs)])
    except InputError as exc:
        checks.append(Check("run folder shared", False, exc.detail,
                            f"or set {where} to another folder"))
        return checks
    except OSError as exc:
        checks.append(Check("run folder shared", False, f"cannot create {runs}: {exc.strerror}",
                            f"set {where} to a folder you can write on "
                            "the filesystem the nodes share"))
        return checks
    marker = os.path.join(runs, f".doctor-{os.getpid()}-{os.urandom(3).hex()}")
    os.close(os.open(marker, os.O_WRONLY | os.O_CREAT, 0o600))
    try:
        seen = run([*one_node_step(profile), "test", "-f", marker], 300.0)
    finally:
        os.unlink(marker)
    if seen.returncode == 0:
        checks.append(Check("run folder shared", True, f"a node sees {runs} ({where})"))
    else:
        checks.append(Check("run folder shared", False, f"a node does not see {runs} ({where})",
                            "set shared_dir: in the profile to a folder on "
                            "the filesystem the nodes share"))
    return checks


__all__ = ["slurm_checks"]
