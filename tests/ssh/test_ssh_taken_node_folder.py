"""Another account made a host's node-local folder (``/tmp/fsdp-orch-<uid>``) first, on an SSH host
with its own disk: the node script keeps its heartbeats in a private folder beside it, the user is
told in the events (``node_tmp_taken``, as on the local kind), and a restart on that host uses the
same private folder again instead of leaving one more behind each attempt."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import Cli, copy_demo, demo_args, make_cli, why
from other_accounts import as_other
from secret_checks import OTHER as OTHER_ACCOUNT

pytestmark = [pytest.mark.slow, pytest.mark.root]


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


def test_a_taken_node_folder_on_an_ssh_host_is_told_and_one_private_folder_serves_every_attempt(
        ssh_hosts, taken_on_host_2, other_account):
    base = ssh_hosts.submit_host_dir / uuid.uuid4().hex[:8]
    cli: Cli = make_cli(base)
    profile = ssh_hosts.own_disks_profile.read_text().replace(
        "\npython: ", f"\npython: '{sys.executable}'\n# was: ")
    (cli.cwd / "clusters").mkdir(parents=True, exist_ok=True)
    (cli.cwd / "clusters" / "own.yaml").write_text(profile)
    made_before = set(Path("/tmp").glob(f"fsdp-orch-{os.getuid()}-*"))
    try:
        proc = cli.run("submit", "--cluster", "own", "--wait", "--json", str(copy_demo(base)),
                       "--set", "nodes=2", "--set", "procs_per_node=1",
                       "--set", "checkpoint.interval=5", "--set", "restart.backoff.initial=1s",
                       "--set", "restart.backoff.jitter=0", "--set", "watch.heartbeat_timeout=10s",
                       "--set", "watch.startup_timeout=120s", "--set", demo_args(30),
                       "--set", "env.FSDP_ORCH_FAULT=hang:step=12:rank=1", timeout=400)
        assert proc.stdout.strip(), proc.stderr
        status = json.loads(proc.stdout)
        assert status["state"] == "SUCCEEDED", why(status)
        # judged from host 2's heartbeats, read from the folder its script made instead
        [failure] = status["failures"]
        assert failure["category"] == "hang" and "rank 1" in failure["evidence"], failure
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
        assert list(taken_on_host_2.iterdir()) == []  # nothing written into the other's folder
        ssh_hosts.assert_nothing_left(cli.home)
    finally:
        for made in set(Path("/tmp").glob(f"fsdp-orch-{os.getuid()}-*")) - made_before:
            shutil.rmtree(made, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
