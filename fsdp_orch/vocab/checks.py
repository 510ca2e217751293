"""One line of ``fsdp-orch doctor``: what was checked, whether it holds, and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


# What a Python prints when it imports torch: its version.
TORCH_VERSION = "import torch; print(torch.__version__)"

# The oldest torch the ranks may have (pyproject's runtime extra says the same): the tests have
# run jobs on it (.venv-xla's torch 2.9.0, through a profile's python).
MIN_TORCH = (2, 9)
MIN_TORCH_TEXT = f"{MIN_TORCH[0]}.{MIN_TORCH[1]}"

# What a machine that runs ranks needs; the CLI's own environment needs no torch.
RANKS_NEED = ("the ranks' python (the profile's python:) needs "
              f"torch>={MIN_TORCH_TEXT}, the one your training already uses, and "
              "fsdp-orch importable there for its bootstrap (pip install 'fsdp-orch[runtime]' "
              "in that environment; on SSH hosts with their own disks fsdp-orch is copied with "
              "the job)")


def torch_too_old(version: str) -> bool:
    """Is ``version`` (``torch.__version__``, e.g. ``2.9.0+cu128``) older than MIN_TORCH?"""
    parts = []
    for piece in version.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts) < MIN_TORCH


# What ``doctor`` says to do when ``sacct`` fails, by what it printed (pure): a client with no
# slurm.conf (a login node or container without the cluster's configuration) is not an accounting
# database the admins must enable.
_NO_SLURM_CONF = ("Could not establish a configuration source", "slurm.conf", "SLURM_CONF")
SACCT_NO_ACCOUNTING = ("status needs SLURM's accounting: ask the admins to enable slurmdbd "
                       "(AccountingStorageType=accounting_storage/slurmdbd)")
SACCT_NO_CONF = ("the SLURM commands found no slurm.conf on this host (no configuration file and "
                 "no slurmctld reachable to read one from, configless): set SLURM_CONF to the "
                 "cluster's slurm.conf (export SLURM_CONF=/etc/slurm/slurm.conf, or where the "
                 "cluster keeps it), or run fsdp-orch on a login node of the cluster")


def sacct_fix(said: str) -> str:
    """The fix for a failed ``sacct``, from what it said on stderr/stdout."""
    if any(sign in said for sign in _NO_SLURM_CONF):
        return SACCT_NO_CONF
    return SACCT_NO_ACCOUNTING
