"""Another account made a host's node-local folder (``/tmp/fsdp-orch-<uid>``) first, on an SSH host
with its own disk: the node script keeps its heartbeats in a private folder beside it, the user is
told in the events (``node_tmp_taken``, as on the local kind), and a restart on that host uses the
same private folder again instead of leaving one more behind each attempt.

The fixture and the checks, not a test: the job that shows it is test_ssh_own_disks' hang test (a
hang on host 2 and a restart, with own disks: the job a test here ran on its own before), run with
``taken_on_host_2``; ``check_the_taken_folder`` is what it asserts of the folder."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from other_accounts import as_other
from secret_checks import OTHER as OTHER_ACCOUNT


def host_mount_namespace_pid(ssh_hosts, i: int) -> int:  # type: ignore[no-untyped-def]
    """A process of host ``i``'s sshd: entering its mount namespace reaches that host alone."""
    for pid in ssh_hosts.pids(i):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                return pid
        except OSError:
            continue
    raise AssertionError(f"no sshd in host {i}'s namespace")


@pytest.fixture
def taken_on_host_2(ssh_hosts, other_account, scratch) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    """On host 2 only, ``/tmp/fsdp-orch-<uid>`` is a folder the other account made (mode 755)."""
    taken = scratch / "taken"
    as_other(other_account, f"mkdir -m 755 {taken}")
    pid = host_mount_namespace_pid(ssh_hosts, 1)
    mine = f"/tmp/fsdp-orch-{os.getuid()}"
    enter = ["nsenter", "-t", str(pid), "-m", "--"]
    subprocess.run([*enter, "sh", "-c", 'mkdir -p -m 700 "$0" && mount --bind "$1" "$0"',
                    mine, str(taken)], check=True, timeout=30)
    try:
        yield taken
    finally:
        subprocess.run([*enter, "umount", mine], check=False, timeout=30)


@contextmanager
def private_folders_removed() -> Iterator[None]:
    """Removes the private node-local folders (``/tmp/fsdp-orch-<uid>-*``) made inside."""
    made_before = set(Path("/tmp").glob(f"fsdp-orch-{os.getuid()}-*"))
    try:
        yield
    finally:
        for made in set(Path("/tmp").glob(f"fsdp-orch-{os.getuid()}-*")) - made_before:
            shutil.rmtree(made, ignore_errors=True)


def check_the_taken_folder(status: dict, other_account: tuple[int, int], taken: Path) -> None:
    """A job of 2 attempts, node 1 on host 2 (whose node-local folder is ``taken``): each attempt
    told it, and both kept host 2's heartbeats in one private folder (mode 700); nothing was written
    into the other account's folder. (The hang verdict of attempt 0 was judged from those
    heartbeats, read from the folder the node script made instead.)"""
    notes = [(e["attempt"], e["message"]) for e in status["events"]
             if e["kind"] == "node_tmp_taken"]
    assert [attempt for attempt, _ in notes] == [0, 1], status["events"]
    mine = f"/tmp/fsdp-orch-{os.getuid()}"
    for _, note in notes:
        assert note.startswith("node 1: node-local folder taken: "), note
        assert (f"{mine} is owned by {OTHER_ACCOUNT} (uid {other_account[0]}), mode 755"
                in note), note
    used = {note.rsplit("heartbeats in ", 1)[1].removesuffix(" instead") for _, note in notes}
    assert len(used) == 1, f"each attempt made a folder of its own: {sorted(used)}"
    [folder] = used
    assert folder.startswith(f"{mine}-") and (Path(folder).stat().st_mode & 0o777) == 0o700
    assert list(taken.iterdir()) == []  # nothing written into the other's folder
