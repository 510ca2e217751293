"""Private by default, and nothing read that is not the caller's: the ownership and mode rules as
pure functions (what ``stat`` said in, a verdict out), and the modes of what fsdp-orch creates
under ``umask 0``."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from fsdp_orch.places.private import (
    ensure_private_root,
    make_private_dirs,
    root_verdict,
    trust_problem,
    untrusted,
    write_atomically,
    write_private,
)
from fsdp_orch.vocab.errors import InputError

DIR, FILE = stat.S_IFDIR, stat.S_IFREG
ME, OTHER = 1000, 1001


def names(uid: int) -> str:
    return {ME: "me", OTHER: "mallory"}[uid]


# --- the rules, pure ----------------------------------------------------------------------------

def test_a_file_of_ours_in_folders_only_we_can_write_is_trusted() -> None:
    chain = [("/r/runs/j/events/a.jsonl", ME, FILE | 0o600), ("/r/runs/j/events", ME, DIR | 0o700),
             ("/r/runs/j", ME, DIR | 0o755), ("/r/runs", ME, DIR | 0o700)]
    assert trust_problem(chain, ME) is None


def test_another_owner_anywhere_up_to_the_run_root_is_refused_and_named() -> None:
    planted = [("/s/runs/j", OTHER, DIR | 0o700), ("/s/runs", ME, DIR | 0o700)]
    why = trust_problem(planted, ME, names)
    assert (why is not None and "/s/runs/j" in why and "uid 1001 (mallory)" in why
            and "uid 1000 (me)" in why)
    above = [("/s/runs/j", ME, DIR | 0o700), ("/s/runs", OTHER, DIR | 0o755)]
    why = trust_problem(above, ME)
    assert why is not None and why.startswith("/s/runs is owned by uid 1001")


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666, 0o777])
def test_a_file_others_can_write_is_refused_with_its_mode(mode: int) -> None:
    why = trust_problem([("/r/runs/j/submission.json", ME, FILE | mode)], ME)
    assert why == f"/r/runs/j/submission.json can be written by others (mode {mode:04o})"


def test_a_folder_above_that_others_can_write_makes_what_is_below_untrusted() -> None:
    chain = [("/r/runs/j", ME, DIR | 0o700), ("/r/runs", ME, DIR | 0o1777)]
    why = trust_problem(chain, ME)
    assert why is not None and "/r/runs can be written by others (mode 1777)" in why


def test_root_verdicts_ok_tighten_or_refuse_with_path_owner_mode_and_fix() -> None:
    assert root_verdict(("/h", ME, DIR | 0o700), ME) == ("ok", None)
    assert root_verdict(("/h", ME, DIR | 0o755), ME) == ("tighten", None)
    assert root_verdict(("/h", ME, DIR | 0o711), ME) == ("tighten", None)
    verdict, why = root_verdict(("/h", ME, DIR | 0o775), ME, names)
    assert verdict == "refuse" and why is not None
    assert "/h" in why and "0775" in why and "uid 1000 (me)" in why and "chmod 700 /h" in why
    verdict, why = root_verdict(("/h", OTHER, DIR | 0o700), ME, names)
    assert verdict == "refuse" and why is not None
    assert ("/h is owned by uid 1001 (mallory) with mode 0700" in why
            and "remove it or choose another" in why)
    verdict, why = root_verdict(("/h", ME, FILE | 0o600), ME)
    assert verdict == "refuse" and why is not None and "not a folder" in why


# --- what is created, under umask 0 -------------------------------------------------------------

@pytest.fixture
def umask0():  # type: ignore[no-untyped-def]
    old = os.umask(0)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_folders_and_files_made_are_0700_and_0600_whatever_the_umask(
        tmp_path: Path, umask0: None) -> None:
    make_private_dirs(str(tmp_path / "a" / "b" / "c"))
    assert [mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")] == [0o700, 0o700, 0o700]
    write_private(str(tmp_path / "a" / "f"), "secret")
    assert mode(tmp_path / "a" / "f") == 0o600 and (tmp_path / "a" / "f").read_text() == "secret"
    assert [p.name for p in (tmp_path / "a").iterdir() if p.name.endswith(".tmp")] == []


def test_event_files_ledger_artifacts_and_schedule_lock_are_private(
        tmp_path: Path, umask0: None) -> None:
    from fsdp_orch.launch.render import Artifact, write_artifacts
    from fsdp_orch.notify.delivery import Ledger
    from fsdp_orch.record.events import EventWriter
    from fsdp_orch.schedule.book import ScheduleBook

    writer = EventWriter(tmp_path / "runs" / "j", "cli")
    writer.append("note")
    writer.close()
    assert (mode(tmp_path / "runs") == mode(tmp_path / "runs" / "j")
            == mode(tmp_path / "runs" / "j" / "events") == 0o700)
    assert mode(Path(writer.path)) == 0o600
    ledger = Ledger(str(tmp_path / "runs" / "j" / "notify"))
    ledger.add("k", "sent", 1.0, 1)
    assert mode(tmp_path / "runs" / "j" / "notify") == 0o700 and mode(Path(ledger.path)) == 0o600
    attempt = tmp_path / "runs" / "j" / "attempt-0"
    write_artifacts([Artifact(str(attempt / "launch.sh"), "#!/bin/sh\n", executable=True),
                     Artifact(str(attempt / "job.json"), "{}")])
    assert (mode(attempt), mode(attempt / "launch.sh"), mode(attempt / "job.json")) == (
        0o700, 0o700, 0o600)
    book = ScheduleBook(tmp_path / "home")
    with book.lock():
        pass
    assert mode(tmp_path / "home" / "schedules") == 0o700
    assert mode(tmp_path / "home" / "schedules" / "scheduler.lock") == 0o600


def test_a_submission_makes_its_run_root_and_run_folder_private(
        tmp_path: Path, umask0: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from fsdp_orch.control.job_control import record_submission
    from fsdp_orch.control.submit_request import SubmitRequest
    from fsdp_orch.places.private import user_name
    from fsdp_orch.record.index import open_index

    (tmp_path / "clusters").mkdir()
    (tmp_path / "clusters" / "shared.yaml").write_text("kind: local\n"
                                                       f"shared_dir: {tmp_path / 'scratch'}\n")
    # the user's own profile, as their umask 022 makes it: made under umask 0, anyone could write
    # it, and it would be refused (a profile decides what runs as the user: places.trust)
    (tmp_path / "clusters").chmod(0o755)
    (tmp_path / "clusters" / "shared.yaml").chmod(0o644)
    (tmp_path / "job.yaml").write_text("name: sleeper\nlauncher: python\ncommand: [sleep, '1']\n")
    monkeypatch.chdir(tmp_path)
    with open_index(str(tmp_path / "home")) as index:
        job_id, _, submission = record_submission(index, SubmitRequest(Path("job.yaml"), "shared"))
    assert submission is not None
    user_root = tmp_path / "scratch" / user_name()
    assert submission.run_dir == user_root / "runs" / job_id
    for folder in (
        user_root, user_root / "runs", submission.run_dir, submission.run_dir / "events"):
        assert mode(folder) == 0o700, folder
    assert mode(submission.run_dir / "submission.json") == 0o600
    assert all(mode(p) == 0o600 for p in (submission.run_dir / "events").iterdir())


def test_an_existing_home_of_ours_is_made_0700_and_one_others_can_write_is_refused(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o755)
    ensure_private_root(str(home))
    assert mode(home) == 0o700
    home.chmod(0o777)
    with pytest.raises(InputError) as err:
        ensure_private_root(str(home))
    text = str(err.value)
    assert (str(home) in text and "0777" in text and f"uid {os.getuid()}" in text
            and f"chmod 700 {home}" in text)
    assert mode(home) == 0o777  # refused, not changed behind the user's back


def test_the_supervisor_is_always_this_fsdp_orch_with_arguments_built_here() -> None:
    from fsdp_orch.backends.supervised_here import supervisor_argv

    assert supervisor_argv("j1", "/r/runs/j1", True) == [
        sys.executable, "-m", "fsdp_orch.supervise.supervisor", "j1", "--run-dir", "/r/runs/j1",
        "--reattach"]


# --- what is read: real files, another owner (needs root for chown) -----------------------------

def test_event_files_and_job_folders_others_could_write_are_not_read(tmp_path: Path) -> None:
    from fsdp_orch.record.events import EventWriter, event_files
    from fsdp_orch.record.index import JobIndex
    from fsdp_orch.record.run_roots import run_folder_problem
    from fsdp_orch.record.store import Store

    runs = tmp_path / "home" / "runs"
    ok, writable = EventWriter(runs / "ok", "submit"), EventWriter(runs / "open", "submit")
    for writer in (ok, writable):
        writer.append("note", text="x")
        writer.close()
    planted = Path(ok.path).with_name("cli-planted.jsonl")
    planted.write_text('{"at": 2, "kind": "state", "state": "CANCELLED"}\n')
    planted.chmod(0o666)
    (runs / "open").chmod(0o777)
    assert event_files(runs / "ok") == [ok.path]
    assert run_folder_problem(str(runs / "ok")) is None
    assert "can be written by others (mode 0777)" in (run_folder_problem(str(runs / "open")) or "")
    index = JobIndex(Store(tmp_path / "jobs.db"), [str(runs)], warn=lambda text: None)
    assert index._new_job_folders([]) == {"ok": str(runs / "ok")}
    if os.geteuid() == 0:
        os.chown(runs / "ok", 4242, 4242)
        why = untrusted(str(runs / "ok"), [str(runs), str(runs.parent)])
        assert why is not None and "owned by uid 4242" in why


# write_atomically, the one way fsdp-orch replaces a whole file: never through a link planted at
# its temporary name (a folder node_exporter reads may be writable by others)
def test_a_link_planted_at_the_temporary_name_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("mine")
    planted = tmp_path / f".out.prom.{os.getpid()}.known.tmp"
    planted.symlink_to(victim)
    with pytest.raises(OSError):
        write_atomically(tmp_path / "out.prom", "metrics", mode=0o644, tmp_tag="known")
    assert victim.read_text() == "mine" and not (tmp_path / "out.prom").exists()


def test_the_file_is_replaced_whole_with_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "out.prom"
    write_atomically(target, "one", mode=0o644)
    write_atomically(target, "two", mode=0o644)
    assert target.read_text() == "two" and (target.stat().st_mode & 0o777) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.prom"]
