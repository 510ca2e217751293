"""Secrets by reference on the real sshd hosts (tests/ssh/hosts.sh), 2 hosts x 1 rank: HF_TOKEN by
from_env and the webhook's Authorization by from_file reach the ranks over the SSH channel and the
receiver, never a file; with own disks (shared_filesystem: false) the hosts' remote_workdir is
grepped on each host too, as the second account and as the owner (tests/secret_checks.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from cli_harness import Cli
from secret_checks import (
    Place,
    SecretJob,
    make_secrets,
    other_account,
    reachable_base,
    receiver,
    write_job,
)

pytestmark = [pytest.mark.slow, pytest.mark.root]


@pytest.fixture
def account() -> tuple[int, int]:
    return other_account()


@pytest.fixture
def base() -> Iterator[Path]:
    """The folder every account may list, holding the home and the job; removed after the checks
    that follow each test (status is fold(events))."""
    with reachable_base("fsdp-orch-secrets-ssh-") as path:
        yield path


def with_this_python(profile: Path) -> str:
    """A profile of hosts.sh with this interpreter (fsdp-orch and torch) as the hosts' python."""
    return profile.read_text().replace("\npython: ", f"\npython: '{sys.executable}'\n# was: ")


def host_disk(ssh_hosts, i: int) -> Place:  # type: ignore[no-untyped-def]
    """Host ``i``'s own disk (holding remote_workdir), seen and grepped on that host over ssh."""
    def run(argv: Sequence[str]):  # type: ignore[no-untyped-def]
        return ssh_hosts.ssh(i, *argv, check=False, timeout=120)
    return Place(f"{ssh_hosts.dir}/host-disk", f"host {i + 1}'s own disk", run)


def run_on_hosts(ssh_hosts, account, base: Path,  # type: ignore[no-untyped-def]
                 tmp_path: Path, profile: Path, own_disks: bool) -> None:
    values = make_secrets(tmp_path / "private")
    with receiver() as got:
        work = tmp_path / "work"
        (work / "clusters").mkdir(parents=True)
        (work / "clusters" / "hosts.yaml").write_text(with_this_python(profile))
        cli = Cli(home=base / "home", cwd=work)
        places = [Place(str(base), "home and job folder")]
        if own_disks:
            places += [host_disk(ssh_hosts, i) for i in range(len(ssh_hosts.addresses))]
        # hosts.sh keeps its state folder (which holds the hosts' disks) 0700: open it to traversal
        # only, as the parent of a real remote_workdir would be, so the second account reaches the
        # disks
        mode = ssh_hosts.dir.stat().st_mode & 0o7777
        ssh_hosts.dir.chmod(0o711)
        try:
            SecretJob(cli=cli, cluster="hosts",
                      job=write_job(base / "job", values, got.port, nodes=2),
                      values=values, receiver=got, nodes=2, home=Place(str(cli.home), "the home"),
                      places=places, account=account).run_and_check()
        finally:
            ssh_hosts.dir.chmod(mode)
            for job in json.loads(cli.run("status", "--json").stdout or "[]"):
                if job["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
                    cli.run("cancel", job["id"])  # a test that failed half-way
            ssh_hosts.assert_nothing_left(cli.home)


def test_ssh_hosts_on_a_shared_filesystem_get_the_secrets_by_reference_and_no_file_holds_them(
        ssh_hosts, account, base, tmp_path):
    run_on_hosts(ssh_hosts, account, base, tmp_path, ssh_hosts.profile, own_disks=False)


def test_ssh_hosts_with_own_disks_get_the_secrets_by_reference_and_no_remote_file_holds_them(
        ssh_hosts, account, base, tmp_path):
    run_on_hosts(ssh_hosts, account, base, tmp_path, ssh_hosts.own_disks_profile, own_disks=True)
