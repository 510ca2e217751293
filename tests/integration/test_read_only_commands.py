"""Commands that only look never write (issue 61): ``status``, ``events``, ``logs``, ``cancel``,
``report`` and ``metrics`` of a home with no index leave nothing behind, not the home, not
``jobs.db``; a damaged home (``runs`` a file) is one line naming what is wrong, exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_harness import Cli
from status_is_fold import CHECKED

from fsdp_orch.record.store import IndexDamaged, _status

LOOKS = [("status",), ("status", "--json"), ("status", "abc123"), ("events", "abc123"),
         ("logs", "abc123"), ("cancel", "abc123"), ("report", "abc123")]


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_looking_at_a_home_that_has_no_index_makes_nothing(tmp_path: Path) -> None:
    cli = Cli(home=tmp_path / "home", cwd=tmp_path)
    for look in LOOKS:
        proc = cli.run(*look, timeout=60)
        unknown = "abc123" in look
        assert proc.returncode == (2 if unknown else 0), (look, proc.stderr)
        if unknown:
            assert proc.stderr.strip() == ("fsdp-orch: error: no job with id 'abc123' (see "
                                           "'fsdp-orch status')"), (look, proc.stderr)
        else:
            assert proc.stdout.strip() in ("[]", "ID  NAME  CLUSTER  STATE  ATTEMPTS  STEP  LOSS  "
                                                 "CKPT  CREATED"), (look, proc.stdout)
        assert files_under(tmp_path) == [], (look, files_under(tmp_path))


@pytest.mark.parametrize(("entry", "make"), [("runs", "file"), ("jobs.db", "folder")])
def test_a_home_entry_that_is_not_what_fsdp_orch_made_is_one_line(
        tmp_path: Path, entry: str, make: str) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / entry).mkdir() if make == "folder" else (home / entry).write_text("")
    cli = Cli(home=home, cwd=tmp_path)
    for look in (("status",), ("events", "abc123"), ("cancel", "abc123")):
        proc = cli.run(*look, timeout=60)
        assert proc.returncode == 2, (look, proc.stderr)
        [line] = proc.stderr.strip().splitlines()
        assert f"{home / entry}: expected a {'folder' if entry == 'runs' else 'file'}" in line, line
    assert sorted(os.listdir(home)) == [entry]
    CHECKED.add(id(cli))  # no status to hold against the event logs: the home is refused


@pytest.mark.parametrize("record", ["[1, 2]", '"text"', "not json", "null"])
def test_an_index_record_fsdp_orch_never_wrote_says_how_to_rebuild_it(record: str) -> None:
    with pytest.raises(IndexDamaged, match="remove the index file .jobs.db"):
        _status(record)
