"""Every malformed input: one message naming file, field path and expectation; exit code 2;
no traceback; nothing written. Runs the real CLI entry point in process (fast); the same table
runs as real subprocesses in tests/integration/test_cli_errors.py.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from fsdp_orch.cli import main as cli

TABLE = runpy.run_path(str(Path(__file__).resolve().parents[1] / "fixtures" / "bad_inputs.py"))
CASES = TABLE["CASES"]
materialize, listing = TABLE["materialize"], TABLE["listing"]
OK_JOB = TABLE["OK_JOB"]


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cwd and an empty $FSDP_ORCH_HOME, so only the built-in profiles are known."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("FSDP_ORCH_HOME", str(tmp_path / "home"))
    return work


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, sandbox: Path,  # type: ignore[no-untyped-def]
                   capsys: pytest.CaptureFixture[str]) -> None:
    materialize(sandbox, case.files)
    materialize(sandbox.parent / "home", case.home)
    before = listing(sandbox.parent)  # the cwd and $FSDP_ORCH_HOME
    for extra in ((), ("--out", "out")):
        code, out, err = run_cli(capsys, *case.argv(*extra))
        assert code == 2, err
        assert out == ""
        assert "Traceback" not in err
        lines = err.splitlines()
        assert len(lines) == 1, f"expected one message, got: {err}"
        assert lines[0].startswith("fsdp-orch: error: ")
        for fragment in case.expect:
            assert fragment in lines[0], f"{fragment!r} missing from: {lines[0]}"
        for fragment in case.absent:
            assert fragment not in lines[0], f"{fragment!r} shown in: {lines[0]}"
        assert listing(sandbox.parent) == before, "an invalid input wrote something"


def test_table_covers_the_issue(capsys: pytest.CaptureFixture[str]) -> None:
    ids = {c.id for c in CASES}
    for wanted in (
        "missing-name", "nodes-wrong-type", "env-wrong-type", "nodes-zero", "nodes-negative",
        "unknown-launcher", "unknown-sharding-strategy", "bad-duration", "unknown-cluster",
        "yaml-syntax-error", "empty-file", "list-document", "not-utf8", "xla-on-slurm",
        "typo-with-hint", "profile-unknown-key", "script-and-command", "no-entry-point",
        "set-without-equals", "bad-env-name",
                   # issue 24, part 4
        "schedule-cron-never-fires", "schedule-remove-name-escapes", "schedule-events-name-escapes",
        "cancel-empty-id", "status-empty-id", "logs-empty-id", "events-empty-id",
        "submit-init-from-empty", "webhook-header-value-crlf", "webhook-header-name-newline",
        "name-with-newline"):
        assert wanted in ids
    for command in (("schedule",), ("cancel",), ("status",), ("logs",), ("events",), ("submit",)):
        assert any(c.command == command for c in CASES), command
    # every schedule command checks NAME
    for action in ("add", "remove", "pause", "resume", "events"):
        assert any(c.command == ("schedule",) and c.args[0] == action and "NAME:" in c.expect
                   for c in CASES)


def test_yaml_syntax_error_names_the_line(sandbox: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    (sandbox / "job.yaml").write_text("name: demo\nscript: train.py\nargs: [a, b\nnodes: 1\n")
    code, _, err = run_cli(capsys, "render", "job.yaml", "--cluster", "local")
    assert code == 2
    assert err.startswith("fsdp-orch: error: job.yaml:4: YAML syntax error")


def test_unknown_cluster_lists_project_and_home_profiles(
        sandbox: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    materialize(sandbox, {"job.yaml": OK_JOB, "clusters/lab.yaml": "kind: local\n"})
    materialize(tmp_path / "home", {"clusters/team.yaml": "kind: local\n"})
    code, _, err = run_cli(capsys, "render", "job.yaml", "--cluster", "labb")
    assert code == 2
    assert "did you mean 'lab'?" in err
    assert "known clusters: kubernetes, lab, local, slurm, ssh, team, tpu-vm" in err


def test_out_that_is_a_file(sandbox: Path, capsys: pytest.CaptureFixture[str]) -> None:
    materialize(sandbox, {"job.yaml": OK_JOB, "out": "not a directory"})
    code, _, err = run_cli(capsys, "render", "job.yaml", "--cluster", "local", "--out", "out")
    assert code == 2
    assert "--out" in err and "expected a directory" in err
    assert (sandbox / "out").read_text() == "not a directory"


def test_set_nested_field_works(sandbox: Path, capsys: pytest.CaptureFixture[str]) -> None:
    materialize(sandbox, {"job.yaml": OK_JOB + "restart: {max_restarts: 1}\n"})
    code, out, err = run_cli(capsys, "render", "job.yaml", "--cluster", "local",
                             "--set", "restart.max_restarts=5", "--set", "env.FOO=$(x) `y` 'z'",
                             "--set", "watch.heartbeat_timeout=90s", "--set", "args=[--steps, 10]")
    assert code == 0, err
    assert '"max_restarts": 5' in out
    assert '"heartbeat_timeout": 90.0' in out
    assert "export FOO='$(x) `y` '\"'\"'z'\"'\"''" in out
    assert "train.py --steps 10" in out


def test_render_out_writes_every_artifact(sandbox: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    materialize(sandbox, {"job.yaml": OK_JOB})
    code, out, _ = run_cli(capsys, "render", "job.yaml", "--cluster", "slurm", "--out", "out")
    assert code == 0
    assert sorted(p.name for p in (sandbox / "out").iterdir()) == [
        "job.json", "node.sh", "sbatch.sh"]
    assert out.split() == [str(Path("out") / n) for n in ("job.json", "sbatch.sh", "node.sh")]
    # executable, private (env values)
    assert ((sandbox / "out" / "node.sh").stat().st_mode & 0o777) == 0o700
    assert ((sandbox / "out" / "job.json").stat().st_mode & 0o777) == 0o600


def test_an_empty_id_names_no_job_even_when_one_exists(sandbox: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``JOB=""; fsdp-orch cancel "$JOB"`` cancelled a running job: "" is a prefix of every id."""
    from fsdp_orch.control.job_control import record_submission
    from fsdp_orch.control.submit_request import SubmitRequest
    from fsdp_orch.record.index import open_index

    materialize(sandbox, {"job.yaml": OK_JOB, "train.py": ""})
    with open_index() as index:
        # recorded, not started
        job_id, created, _ = record_submission(index, SubmitRequest(Path("job.yaml"), "local"))
    assert created
    before = listing(sandbox.parent)
    for argv in (("cancel", ""), ("status", ""), ("logs", ""), ("events", ""), ("cancel", " ")):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and out == "" and "JOB_ID: expected a job id" in err, (argv, err)
    assert listing(sandbox.parent) == before
    with open_index() as index:  # read as it is: a status here could start its supervisor
        assert index.store.job(job_id).state == "PENDING"
        assert index.store.find_job_id("") is None and index.store.find_job_id(job_id[:4]) == job_id
