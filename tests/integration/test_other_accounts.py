"""Another account shares the machine and plays against the user (issue 42), with a real second
account (``useradd``, then ``setpriv``; the tests run as root, the victim). What it plants where the
user works is refused with one line naming the file, its owner and its mode, and nothing of it runs.

Attacks covered here: a cluster profile planted in ``./clusters`` of a folder every account can
write, whose ``python:`` is the other account's wrapper; a launch template planted in
``./templates`` there."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import secret_checks
from cli_harness import Cli

OTHER = secret_checks.OTHER


@pytest.fixture
def other_account() -> tuple[int, int]:
    return secret_checks.other_account()


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder every account can write, like /tmp or /scratch (mode 1777, root's)."""
    path = Path(tempfile.mkdtemp(prefix="fsdp-orch-shared-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_other(account: tuple[int, int], script: str) -> None:
    """Run ``script`` (bash) as the other account."""
    import subprocess

    uid, gid = account
    subprocess.run(secret_checks.as_account(uid, gid, ["bash", "-euc", script]), check=True,
                   capture_output=True, timeout=60)


def plant_wrapper(account: tuple[int, int], scratch: Path, marker: Path) -> Path:
    """The other account's ``python``: it notes who ran it, then runs python."""
    wrapper = scratch / "python-wrapper"
    as_other(account, f"printf '#!/bin/sh\\nid > {marker}\\nexec python3 \"$@\"\\n' > {wrapper}; "
                      f"chmod 755 {wrapper}")
    return wrapper


def victim_job(tmp_path: Path) -> Path:
    """The victim's own job, in a folder of its own: a script the profile's python runs."""
    job_dir = tmp_path / "mine"
    job_dir.mkdir()
    (job_dir / "train.py").write_text("print('trained')\n")
    job = job_dir / "job.yaml"
    job.write_text("name: mine\nscript: train.py\nlauncher: python\n")
    return job


def test_a_profile_planted_in_a_shared_folder_is_refused_and_its_python_never_runs(
        tmp_path: Path, other_account: tuple[int, int], scratch: Path) -> None:
    marker = scratch / "ran-as-the-victim"
    wrapper = plant_wrapper(other_account, scratch, marker)
    as_other(other_account, f"mkdir -m 755 {scratch}/clusters; printf 'kind: local\\ndevice: cpu\\n"
                            f"python: {wrapper}\\n' > {scratch}/clusters/local.yaml")
    job = victim_job(tmp_path)
    cli = Cli(home=tmp_path / "home", cwd=scratch)  # the victim works in the shared folder

    listed = cli.run("clusters")
    assert listed.returncode == 0, listed.stderr
    assert f"{scratch}/clusters/local.yaml" in listed.stdout and "REFUSED" in listed.stdout
    assert f"is owned by uid {other_account[0]} ({OTHER})" in listed.stdout, listed.stdout
    [row] = [r for r in json.loads(cli.run("clusters", "--json", check=True).stdout)
             if r["name"] == "local"]
    assert row["origin"] == "project" and f"{scratch}/clusters" in row["refused"], row

    submitted = cli.run("submit", "--cluster", "local", "--wait", str(job), timeout=120)
    assert submitted.returncode == 2, (submitted.stdout, submitted.stderr)
    [line] = submitted.stderr.strip().splitlines()
    assert f"refused cluster profile {scratch}/clusters/local.yaml" in line, line
    assert f"uid {other_account[0]} ({OTHER})" in line and "(mode 0644)" in line, line
    assert "--cluster PATH" in line, line  # what to do
    assert "Traceback" not in submitted.stderr
    time.sleep(2)  # a supervisor started detached would have run the wrapper by now
    assert not marker.exists(), f"the planted python ran as the victim: {marker.read_text()}"
    assert not (cli.home / "runs").exists() or not any((cli.home / "runs").iterdir())

    # named by path, the same file is refused the same way
    by_path = cli.run("submit", "--cluster", f"{scratch}/clusters/local.yaml", str(job))
    assert by_path.returncode == 2 and "refused cluster profile" in by_path.stderr
    assert not marker.exists()


def test_a_template_planted_in_a_shared_folder_is_refused(
        tmp_path: Path, other_account: tuple[int, int], scratch: Path) -> None:
    marker = scratch / "ran-as-the-victim"
    planted = scratch / "templates" / "local.sh.j2"
    as_other(other_account, f"mkdir -m 755 {scratch}/templates; "
                            f"printf '#!/bin/sh\\nid > {marker}\\n' > {planted}")
    job = victim_job(tmp_path)
    profile = tmp_path / "profiles" / "mine.yaml"
    profile.parent.mkdir()
    profile.write_text("kind: local\ndevice: cpu\n")
    cli = Cli(home=tmp_path / "home", cwd=scratch)

    for command in (["render", "--cluster", str(profile), str(job)],
                    ["submit", "--cluster", str(profile), "--wait", str(job)]):
        proc = cli.run(*command, timeout=120)
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert f"refused template {scratch}/templates/local.sh.j2" in proc.stderr, proc.stderr
        assert f"uid {other_account[0]} ({OTHER})" in proc.stderr
        assert "Traceback" not in proc.stderr
    time.sleep(2)
    assert not marker.exists(), marker.read_text()
