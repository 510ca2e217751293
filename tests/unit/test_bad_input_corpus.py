"""Issue 61, target 3: every input of tests/unit/bad_input_corpus.py, through the CLI's entry
point in process, each with a fresh cwd and $FSDP_ORCH_HOME: a bad one is exit 2, one error line
naming the file or flag, the field and what was expected, no traceback, nothing written; a
legitimate edge value is accepted. A few run as real subprocesses too, to show the in-process path
is the real one."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from bad_input_corpus import (  # type: ignore[import-not-found]
    ACCEPTED,
    CASES,
    REFUSED,
    SAFE,
    Case,
)

from fsdp_orch.cli import main as cli

REPO = Path(__file__).resolve().parents[2]


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` with what it holds (a digest; 'dir'; '?' for one unreadable)."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            found[os.path.relpath(os.path.join(dirpath, name), root)] = "dir"
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as f:
                    found[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
            except OSError:
                found[os.path.relpath(path, root)] = "?"
    return found


def materialize(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def prepare(case: Case, tmp_path: Path) -> tuple[Path, Path]:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    materialize(work, case.files)
    if case.home or case.setup:
        home.mkdir(mode=0o700)
        materialize(home, case.home)
    if case.setup is not None:
        case.setup(work, home)
    return work, home


def outcome_of(case: Case, code: int, out: str, err: str,
               before: dict[str, str], after: dict[str, str]) -> str | None:
    """What is wrong with one run of ``case`` (None: nothing): the audit's kinds first."""
    if "Traceback" in err:
        return f"traceback: {err[-600:]}"
    if case.outcome == ACCEPTED:
        return None if code == 0 else f"refused a legitimate input (exit {code}): {err[-400:]}"
    if case.outcome == SAFE and code == 0:
        return None
    if code == 0:
        return f"wrongly accepted: {out[-200:]!r}"
    if after != before:
        new = sorted(set(after) - set(before))
        changed = sorted(k for k in before if after.get(k) != before[k])
        return f"partial write: new {new[:5]}, changed {changed[:5]}"
    if code != 2:
        return f"exit {code}, expected 2: {err[-400:]}"
    lines = [line for line in err.splitlines() if not line.startswith("fsdp-orch: warning: ")]
    errors = [line for line in lines if ": error: " in line]
    if len(errors) != 1:
        return f"expected one error line, got: {err[-600:]}"
    line = errors[0]
    ours = line.startswith("fsdp-orch: error: ") and not lines[0].startswith("usage:")
    if ours and len(lines) != 1:
        return f"expected only the error line, got: {err[-600:]}"
    if not ours and not (line.startswith("fsdp-orch") and lines[0].startswith("usage:")):
        return f"not an error line of fsdp-orch or its argument parser: {err[-600:]}"
    missing = [f for f in case.expect if f not in line]
    return f"message lacks {missing}: {line}" if missing else None


def run_in_process(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> str | None:
    work, home = prepare(case, tmp_path)
    monkeypatch.chdir(work)
    monkeypatch.setenv("FSDP_ORCH_HOME", str(home))
    monkeypatch.delenv("FSDP_ORCH_DB", raising=False)
    before = snapshot(tmp_path)
    try:
        code = cli.main(list(case.argv))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else 2
    except BaseException:  # noqa: BLE001 - an uncaught exception is the traceback we look for
        out, err = capsys.readouterr()
        return "traceback: " + traceback.format_exc()[-1500:]
    out, err = capsys.readouterr()
    return outcome_of(case, code, out, err, before, snapshot(tmp_path))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_bad_input_is_one_clear_line_and_writes_nothing(
        case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    try:
        problem = run_in_process(case, tmp_path, monkeypatch, capsys)
    finally:
        for path in tmp_path.rglob("*"):  # what a case made unreadable, pytest must remove
            if not path.is_symlink():
                path.chmod(0o700 if path.is_dir() else 0o600)
    assert problem is None, f"{case.id} {case.argv!r}: {problem}"


def test_the_corpus_is_wide() -> None:
    refused = [c for c in CASES if c.outcome == REFUSED]
    assert len(CASES) >= 275 and len(refused) >= 240
    commands = {c.argv[0] for c in CASES}
    assert {"submit", "render", "status", "cancel", "events", "logs", "report", "metrics", "fit",
            "doctor", "schema", "schedule"} <= commands
    for kind in ("local", "slurm", "ssh", "tpu", "kubernetes"):
        assert sum(c.id.startswith(f"profile-{kind}-") for c in CASES) >= 15, kind


SUBPROCESS_IDS = ("job-name-rlo", "profile-slurm-mem-negative", "metrics--serve-'٩٤٦٤'",
                  "home-runs-a-file-status", "status-unknown-id", "profile-ok-slurm-mem-0")


@pytest.mark.parametrize("case_id", SUBPROCESS_IDS)
def test_a_real_process_says_the_same(case_id: str, tmp_path: Path) -> None:
    case = next(c for c in CASES if c.id == case_id)
    work, home = prepare(case, tmp_path)
    env = {**os.environ, "FSDP_ORCH_HOME": str(home), "PYTHONPATH": str(REPO)}
    env.pop("FSDP_ORCH_DB", None)
    before = snapshot(tmp_path)
    done = subprocess.run([sys.executable, "-m", "fsdp_orch", *case.argv], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    problem = outcome_of(case, done.returncode, done.stdout, done.stderr, before,
                         snapshot(tmp_path))
    assert problem is None, f"{case.id}: {problem}"
