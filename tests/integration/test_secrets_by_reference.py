"""Secrets by reference on the local kind (issue 24, part 3): ``env.HF_TOKEN: {from_env: ...}``, a
plain ``env.WANDB_API_KEY`` and a webhook ``Authorization: {from_file: ...}``, run through torchrun
with a shared_dir; the ranks see every value, the receiver gets the header, no other account finds
a value and the owner finds no referenced one; no display prints a value (tests/secret_checks.py).
A reference that cannot be resolved is refused at submit, before anything is written."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import Cli
from secret_checks import (
    ENV_NAME,
    Place,
    SecretJob,
    make_secrets,
    other_account,
    reachable_base,
    receiver,
    scratch_in,
    submit_env,
    write_job,
)


@pytest.fixture
def account() -> tuple[int, int]:
    return other_account()


@pytest.fixture
def base() -> Iterator[Path]:
    """The folder every account may list, holding the home, the shared_dir and the job; removed
    after the checks that follow each test (status is fold(events))."""
    with reachable_base("fsdp-orch-secrets-local-") as path:
        yield path


@pytest.mark.slow
@pytest.mark.root
def test_a_local_job_gets_its_secrets_by_reference_and_no_file_or_display_holds_them(
        account, base, tmp_path):
    values = make_secrets(tmp_path / "private")
    with receiver() as got:
        shared = scratch_in(base)
        work = tmp_path / "work"
        (work / "clusters").mkdir(parents=True)
        (work / "clusters" / "scratch.yaml").write_text("kind: local\ndevice: cpu\n"
                                                        f"shared_dir: {shared}\n")
        cli = Cli(home=base / "home", cwd=work)
        job = write_job(base / "job", values, got.port, nodes=1)
        status = SecretJob(cli=cli, cluster="scratch", job=job, values=values, receiver=got,
                           nodes=1,
                           home=Place(str(cli.home), "the home"),
                           places=[Place(str(base), "home, shared_dir, job")],
                           account=account).run_and_check()
        assert Path(status["run_dir"]).is_relative_to(shared), status["run_dir"]


def snapshot(*folders: Path) -> dict[str, str]:
    """Every path under ``folders`` with a digest of its content (``dir`` for a folder)."""
    found = {}
    for folder in folders:
        for path in [folder, *folder.rglob("*")] if folder.exists() else []:
            found[str(path)] = ("dir" if path.is_dir()
                                else hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def refused_job(tmp_path: Path, env_line: str, header_line: str = "") -> tuple[Cli, Path, Path]:
    """A CLI with a shared_dir profile (its home made by a first ``status``) and a job."""
    shared = tmp_path / "shared"
    shared.mkdir()
    work = tmp_path / "work"
    (work / "clusters").mkdir(parents=True)
    (work / "clusters" / "scratch.yaml").write_text("kind: local\ndevice: cpu\n"
                                                    f"shared_dir: {shared}\n")
    cli = Cli(home=tmp_path / "home", cwd=work)
    assert json.loads(cli.run("status", "--json", check=True).stdout) == []
    job = work / "job.yaml"
    text = f"name: refused\nlauncher: python\ncommand: [python3, -c, 'pass']\nenv:\n  {env_line}\n"
    if header_line:
        text += f"notify:\n  - url: http://127.0.0.1:9/hook\n    headers:\n      {header_line}\n"
    job.write_text(text)
    return cli, job, shared


def test_from_env_naming_an_unset_variable_is_refused_naming_the_field_and_writes_nothing(tmp_path):
    unset = "TEST_UNSET_" + os.urandom(4).hex().upper()
    cli, job, shared = refused_job(tmp_path, f"HF_TOKEN: {{from_env: {unset}}}")
    before = snapshot(cli.home, shared)
    env = {k: v for k, v in cli.env.items() if k != unset}
    proc = cli.run("submit", "--cluster", "scratch", str(job), env=env)
    assert proc.returncode == 2, proc.stderr
    assert "env.HF_TOKEN" in proc.stderr and unset in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert snapshot(cli.home, shared) == before
    assert json.loads(cli.run("status", "--json", check=True).stdout) == []
    # the reference itself is valid: with the variable set, the same job renders
    rendered = cli.run("render", str(job), "--cluster", "scratch", env={**env, unset: "x" * 12})
    assert rendered.returncode == 0, rendered.stderr


def assert_refused(cli, job, shared, values) -> None:  # type: ignore[no-untyped-def]
    """submit exits 2, with no traceback, no value printed and nothing written."""
    before = snapshot(cli.home, shared)
    proc = cli.run("submit", "--cluster", "scratch", str(job), env=submit_env(cli, values))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    for value in values.all:
        assert value not in proc.stdout + proc.stderr
    assert snapshot(cli.home, shared) == before


def test_from_file_that_others_may_read_is_refused_without_printing_it_and_writes_nothing(tmp_path):
    values = make_secrets(tmp_path / "private")
    values.auth_file.chmod(0o644)
    cli, job, shared = refused_job(tmp_path, f"HF_TOKEN: {{from_env: {ENV_NAME}}}",
                                   f"Authorization: {{from_file: "
                                   f"{json.dumps(str(values.auth_file))}}}")
    assert_refused(cli, job, shared, values)
    assert json.loads(cli.run("status", "--json", check=True).stdout) == []
    # the same file at 0600 is taken
    values.auth_file.chmod(0o600)
    rendered = cli.run("render", str(job), "--cluster", "scratch", env=submit_env(cli, values))
    assert rendered.returncode == 0, rendered.stderr


@pytest.mark.root
def test_from_file_owned_by_another_account_is_refused(account, tmp_path):
    values = make_secrets(tmp_path / "private")
    os.chown(values.auth_file, *account)
    cli, job, shared = refused_job(tmp_path, f"HF_TOKEN: {{from_env: {ENV_NAME}}}",
                                   f"Authorization: {{from_file: "
                                   f"{json.dumps(str(values.auth_file))}}}")
    assert_refused(cli, job, shared, values)
    # the same file, the caller's own, is taken
    os.chown(values.auth_file, os.getuid(), os.getgid())
    rendered = cli.run("render", str(job), "--cluster", "scratch", env=submit_env(cli, values))
    assert rendered.returncode == 0, rendered.stderr
