"""Putting a job on SSH hosts that have their own disks (``shared_filesystem: false``): one archive
per attempt, unpacked into the job's run folder on every host, and a checkpoint made whole on every
host before an attempt resumes from it.

The archive holds ``lib/fsdp_orch`` (fsdp-orch's own code: the hosts need only Python and the job's
libraries), ``code/`` (the folder of job.yaml) and the attempt's rendered files (job.json, the node
scripts). The checkpoint a resume reads was written in pieces, each rank's shards on its own host;
``complete_on_every_host`` copies the missing pieces, through this machine, before the next attempt.
"""

from __future__ import annotations

import io
import logging
import os
import posixpath
import shlex
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from fsdp_orch.backends.over_ssh.connect import connect, on_every_host, run_on, run_with_input
from fsdp_orch.launch.plan import OWN_DISK_CODE, OWN_DISK_PACKAGE, LaunchPlan
from fsdp_orch.launch.render import Artifact, write_artifacts
from fsdp_orch.places.remote_trust import make_and_check_command
from fsdp_orch.vocab.errors import FsdpOrchError

log = logging.getLogger(__name__)
PACKAGE_DIR = Path(__file__).resolve().parents[2]  # fsdp_orch/
# More than this in job.yaml's folder is data, not code: it belongs on the hosts already.
CODE_LIMIT_BYTES = 256 * 1024 * 1024
SKIPPED_NAMES = frozenset({"__pycache__", "_data"})


def _skipped(name: str) -> bool:
    return name.startswith(".") or name in SKIPPED_NAMES or name.endswith(".pyc")


def _add_tree(archive: tarfile.TarFile, root: Path, arcroot: str, leave_out: set[Path],
              limit: int | None = None) -> int:
    total = 0
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not _skipped(d) and (here / d) not in leave_out)
        for name in sorted(files):
            path = here / name
            if _skipped(name) or not path.is_file():
                continue
            total += path.stat().st_size
            if limit is not None and total > limit:
                raise FsdpOrchError(
                    f"{root} holds more than {limit // 2**20} MiB to copy to every host "
                    "(shared_filesystem: false copies the folder of job.yaml); keep data out of "
                    "it, or use a shared filesystem")
            archive.add(path, arcname=posixpath.join(arcroot, path.relative_to(root).as_posix()),
                        recursive=False)
    return total


def job_archive(plan: LaunchPlan, artifacts: list[Artifact], job_dir: str) -> bytes:
    """The gzipped tar unpacked into ``plan.run_dir`` on every host."""
    buffer = io.BytesIO()
    code_dir = Path(job_dir)
    # A checkpoint folder inside the job's folder (left by a local run) is not code.
    code_checkpoints = code_dir / posixpath.relpath(plan.checkpoint_dir,
                                                    posixpath.join(plan.run_dir, OWN_DISK_CODE))
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
        _add_tree(archive, PACKAGE_DIR, posixpath.join(OWN_DISK_PACKAGE, "fsdp_orch"), set())
        _add_tree(archive, code_dir, OWN_DISK_CODE, {code_checkpoints}, CODE_LIMIT_BYTES)
        for artifact in artifacts:
            data = artifact.text.encode()
            info = tarfile.TarInfo(posixpath.relpath(artifact.path, plan.run_dir))
            info.size, info.mode = len(data), 0o700 if artifact.executable else 0o600
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def unpack_on_every_host(plan: LaunchPlan, archive: bytes, ssh: Any) -> None:
    # --no-same-permissions: the umask applies to every file, also where tar runs as root (which
    # would otherwise give the archive's modes, and the job's code would be readable by all).
    # The run folder made, then held to the StrictModes rule on each host at each attempt: in a
    # shared scratch another account could have made remote_workdir first, to swap the scripts.
    command = (f"{make_and_check_command(plan.run_dir, 'run folder')} && "
               f"tar --no-same-permissions -xzf - -C {shlex.quote(plan.run_dir)}")
    on_every_host(plan_hosts(plan, ssh),
                  lambda i, host: run_with_input(host, ssh, command, archive,
                                                 timeout=ssh.connect_timeout + 120))


def plan_hosts(plan: LaunchPlan, ssh: Any) -> list[Any]:
    """The host entry (of ``ssh``, the SSH settings and hosts: an ssh profile) of each node of the
    plan, by node rank."""
    by_place = {(host.address, host.port): host for host in ssh.hosts}
    return [by_place[(node.address, node.port)] for node in plan.nodes]


def _files_on(host: Any, profile: Any, folder: str) -> dict[str, int]:
    """Every file under ``folder`` on ``host`` (relative path: size); {} when there is none."""
    result = run_on(host, profile,
                    f"cd {shlex.quote(folder)} 2>/dev/null && find . -type f -printf '%P\\t%s\\n'",
                    timeout=profile.connect_timeout + 60)
    files = {}
    for line in result.stdout.splitlines():
        name, _, size = line.rpartition("\t")
        if name and size.isdigit():
            files[name] = int(size)
    return files


def complete_on_every_host(hosts: list[Any], profile: Any, folder: str) -> tuple[int, int]:
    """Copy to each host the files of checkpoint ``folder`` that another host has and it lacks.
    Returns (files copied, bytes copied)."""
    held = on_every_host(hosts, lambda i, host: _files_on(host, profile, folder))
    wanted: dict[str, tuple[int, int]] = {}  # name: (size, index of a host that has it)
    for i, files in enumerate(held):
        for name, size in files.items():
            wanted.setdefault(name, (size, i))
    copies = [(name, source, target) for name, (size, source) in sorted(wanted.items())
              for target in range(len(hosts)) if held[target].get(name) != size]
    if not copies:
        return 0, 0
    conns = [connect(host, profile) for host in hosts]
    try:
        sftps = [conn.sftp() for conn in conns]
        copied = 0
        for name, source, target in copies:
            path = posixpath.join(folder, name)
            conns[target].run(f"umask 077 && mkdir -p {shlex.quote(posixpath.dirname(path))}",
                              hide=True, in_stream=False)
            with tempfile.TemporaryFile() as spool:
                sftps[source].getfo(path, spool)
                spool.seek(0)
                sftps[target].putfo(spool, path + ".fsdp-orch-part")
                copied += spool.tell()
            sftps[target].posix_rename(path + ".fsdp-orch-part", path)
        return len(copies), copied
    finally:
        for conn in conns:
            conn.close()


def put_on_own_disks(plan: LaunchPlan, artifacts: list[Artifact], submission: Any,
                     ssh: Any) -> None:
    """Everything the attempt needs, on every host of the plan (reached with ``ssh``); a copy of the
    rendered files in the supervisor's run folder, for the record. When the attempt resumes, the
    checkpoint first."""
    local_run_dir = Path(submission.run_dir)
    write_artifacts([Artifact(str(local_run_dir / posixpath.relpath(a.path, plan.run_dir)), a.text,
                              a.executable)
                     for a in artifacts])
    unpack_on_every_host(plan, job_archive(plan, artifacts, submission.job_dir), ssh)
    if plan.resume_from:
        files, size = complete_on_every_host(plan_hosts(plan, ssh), ssh, plan.resume_from)
        if files:
            log.info(f"fsdp-orch supervisor: copied {files} file(s), {size / 2**20:.1f} MiB, of "
                     f"{plan.resume_from} between the hosts, so that each has all of it")
