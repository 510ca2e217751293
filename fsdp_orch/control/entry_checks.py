"""What the job's own entry (its script, or its module's file) says about how fsdp-orch can act on
it: whether it uses ``fsdp_orch.runtime``, read from its source and the Python files beside it
(a helper of the script's may be the one importing it). Two rules stand on that: a fault kind only
the runtime injects (``checkpoint_crash``) is refused at submit for a job that does not use it
(otherwise it would run to its end with no fault and no word), and ``render`` says that the job's
``fsdp:`` block does not reach such a script. The rules are pure; :func:`read_entry` reads."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fsdp_orch.bootstrap.faults import RUNTIME_ONLY_KINDS, parse_faults
from fsdp_orch.jobspec.schema import JobSpec

FAULT_ENV = "FSDP_ORCH_FAULT"
# ``import fsdp_orch.runtime``, ``from fsdp_orch.runtime... import``, ``from fsdp_orch import
# runtime``: written anywhere in the file (a guarded or indented import counts).
_RUNTIME_IMPORT = re.compile(
    r"\bfsdp_orch\.runtime\b|\bfrom\s+fsdp_orch\s+import\s+[^\n]*\bruntime\b")
_MOST_FILES = 200  # Python files read beside the entry
_MOST_BYTES = 2 << 20  # bytes read of one file
FSDP_BLOCK_NOTE = ("fsdp: applies to scripts using fsdp_orch.runtime; {entry} does not import "
                   "it: a Hugging Face Trainer script takes --fsdp/--fsdp_config from its own args "
                   "(job.yaml args:), an Accelerate script from its accelerate config")


@dataclass(frozen=True)
class EntrySource:
    """The entry as fsdp-orch found it on this machine."""

    name: str  # as job.yaml names it: train.py, pkg.train
    uses_runtime: bool


def imports_runtime(text: str) -> bool:
    """Whether Python source imports ``fsdp_orch.runtime`` (or a module of it). Pure."""
    return _RUNTIME_IMPORT.search(text) is not None


def _entry_file(job: JobSpec, workdir: Path) -> Path | None:
    kind, value = job.entry
    if kind == "script":
        return workdir / value
    if kind == "module":
        base = workdir.joinpath(*value.split("."))
        for candidate in (base.with_suffix(".py"), base / "__main__.py"):
            if candidate.is_file():
                return candidate
    return None  # a command: its program is not known to be Python


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as f:
            return f.read(_MOST_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


def read_entry(job: JobSpec, job_dir: str) -> EntrySource | None:
    """The job's entry and whether it (or a Python file in its folder) imports the runtime; None
    where it cannot be read here (a command, a script only the nodes have)."""
    path = _entry_file(job, Path(job_dir) / job.workdir)
    text = None if path is None else _read(path)
    if path is None or text is None:
        return None
    if imports_runtime(text):
        return EntrySource(job.entry[1], True)
    beside = sorted(p for p in path.parent.glob("*.py") if p != path)[:_MOST_FILES]
    return EntrySource(job.entry[1], any(imports_runtime(_read(p) or "") for p in beside))


def unmet_fault(env: dict[str, str], entry: EntrySource | None) -> str | None:
    """Why the job's injected faults cannot happen: a kind only the runtime injects, in a job
    whose entry does not use the runtime; None when they can (or the entry is unknown). Pure."""
    if entry is None or entry.uses_runtime or not env.get(FAULT_ENV):
        return None
    try:
        kinds = sorted({f.kind for f in parse_faults(env[FAULT_ENV])} & set(RUNTIME_ONLY_KINDS))
    except ValueError:
        return None  # the spec's own validation says what is wrong with it
    if not kinds:
        return None
    return (f"{', '.join(kinds)} happens inside a checkpoint save of fsdp_orch.runtime, and "
            f"{entry.name} does not import fsdp_orch.runtime: the job would run to its end with "
            f"no fault; expected a script using the runtime, or a kind the bootstrap injects in "
            f"any script (hang, crash, kill, collective_timeout, slow)")


def fsdp_block_note(job: JobSpec, entry: EntrySource | None) -> str | None:
    """``render``'s line where the job sets an ``fsdp:`` block its script never reads. Pure."""
    if entry is None or entry.uses_runtime or not job.fsdp.model_fields_set:
        return None
    return FSDP_BLOCK_NOTE.format(entry=entry.name)


__all__ = ["EntrySource", "FSDP_BLOCK_NOTE", "fsdp_block_note", "imports_runtime", "read_entry",
           "unmet_fault"]
