"""What the commands share: exit codes, the index and a job id's resolution in it, the private home,
and the lines said beside a command's output. Stdlib only at import: ``status`` starts here."""

from __future__ import annotations

import os
import sys

from fsdp_orch.vocab.errors import InputError, JobNotFound

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

    from fsdp_orch.record.index import JobIndex
    from fsdp_orch.record.status import JobStatus

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_WAIT_TIMED_OUT = 0, 1, 2, 3


def open_index(read_only: bool = False) -> JobIndex:
    """The index of the event logs under $FSDP_ORCH_HOME (os.path, not pathlib: `status` starts
    fast); ``read_only``: a command that only looks never makes the index (record.index)."""
    from fsdp_orch.record.index import open_index as opened

    return opened(read_only=read_only)


def private_home() -> None:
    """$FSDP_ORCH_HOME (and the local store folders apart from it) must be the caller's own."""
    from fsdp_orch.places.home import home_dir, home_layout_problem, local_store_folders
    from fsdp_orch.places.private import ensure_private_root

    home = home_dir()
    ensure_private_root(home, create=False)  # made 0700 by whatever first writes there
    damaged = home_layout_problem(home)
    if damaged is not None:
        path, expected = damaged
        raise InputError(f"expected {expected} that fsdp-orch made, found something else: move "
                         "it aside (the index is built again from the event logs)", file=path)
    apart = local_store_folders(home)
    if apart:
        ensure_private_root(apart[0],
                            above=apart[1:2] if os.environ.get("XDG_RUNTIME_DIR") else apart[1:],
                            create=False)


def resolve_id(index: JobIndex, job_id: str) -> str:
    found = index.store.find_job_id(job_id)
    if found is None:
        index.ingest()  # submitted from another login node since the last look
        found = index.store.find_job_id(job_id)
    if found is None:
        raise JobNotFound(job_id)
    index.ingest([found])
    return found


def say(lines: tuple[str, ...] | list[str]) -> None:
    """What submit and render tell the user beside their output (stderr, one line each)."""
    for line in lines:
        print(f"fsdp-orch: {line}", file=sys.stderr, flush=True)


def print_table(jobs: list[JobStatus], detail: bool = False) -> None:
    from fsdp_orch.cli.status_table import format_jobs

    print(format_jobs(jobs, detail=detail))


def add_job_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="JOB_YAML", help="the job spec")
    p.add_argument("--cluster", required=True,
                   help="cluster profile name (see 'fsdp-orch clusters') or a YAML path")
    p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a job spec field; the value is YAML: --set nodes=2, "
                        "--set 'args=[--steps, \"100\"]', "
                        "--set env.FSDP_ORCH_FAULT=hang:step=50:rank=1 (repeatable)")
    p.add_argument("--accelerate-config", metavar="FILE",
                   help="an 'accelerate config' YAML whose FSDP options fill the job's fsdp:")


GPU_MEMORY_HELP = "each GPU's memory (80GB), in place of the profile's gpu_memory"  # fit, submit
JOB_ID_HELP = "a job's id, or the start of one that names a single job (as status lists them)"
