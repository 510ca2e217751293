"""A shared scratch has other users: a job folder another account plants there is never listed and
nothing of it runs as the caller, and ``doctor`` names it. With a real second account (the tests run
as root; under CI=true not being root is a failure, elsewhere a skip)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from cli_harness import Cli

OTHER = "fsdporchtest"


def as_other(uid: int, gid: int, *argv: str) -> None:
    subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv],
                   check=True, capture_output=True, timeout=60)


def planted_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: Path,
                marker: Path) -> tuple[str, Path]:
    """A genuine job folder (submission, then a supervisor that died), rewritten to live at
    ``target`` with a ``supervisor_command`` that writes ``marker``: what the other account copies
    in. Returns (job id, the folder to copy), readable by everyone."""
    from fsdp_orch.control.job_control import record_submission
    from fsdp_orch.control.submit_request import SubmitRequest
    from fsdp_orch.record.index import open_index

    src = tmp_path / "template"
    (src / "clusters").mkdir(parents=True)
    (src / "clusters" / "plain.yaml").write_text("kind: local\ndevice: cpu\n")
    (src / "job.yaml").write_text("name: planted\nlauncher: python\ncommand: [sleep, '1']\n")
    monkeypatch.chdir(src)
    monkeypatch.setenv("FSDP_ORCH_HOME", str(src / "home"))
    dead = subprocess.Popen(["true"])
    dead.wait()
    with open_index(str(src / "home")) as index:
        job_id, _, submission = record_submission(index, SubmitRequest(Path("job.yaml"), "plain"))
        assert submission is not None
        index.journal(job_id).supervisor_started(pid=dead.pid)
    folder = submission.run_dir
    sub = json.loads((folder / "submission.json").read_text())
    sub["supervisor_command"] = ["bash", "-c", f"id > {marker}"]
    (folder / "submission.json").write_text(json.dumps(sub))
    for path in folder.rglob("*"):
        if path.is_file():
            path.write_text(path.read_text().replace(str(folder), str(target / job_id)))
    staged = Path(tempfile.mkdtemp(prefix="plant-", dir=marker.parent))  # removed with the scratch
    shutil.copytree(folder, staged / job_id)
    subprocess.run(["chmod", "-R", "a+rX", str(staged)], check=True)
    return job_id, staged / job_id


def test_a_job_folder_planted_in_the_shared_dir_is_not_listed_not_run_and_named_by_doctor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other_account: tuple[int, int],
        scratch: Path) -> None:
    uid, gid = other_account
    me = pwd.getpwuid(os.getuid()).pw_name
    marker = scratch / "marker"
    # 1. Where fsdp-orch put shared runs before per-user roots: <shared_dir>/runs.
    legacy_id, legacy_src = planted_job(tmp_path / "a", monkeypatch, scratch / "runs", marker)
    as_other(uid, gid, "mkdir", "-p", str(scratch / "runs"))
    as_other(uid, gid, "cp", "-r", str(legacy_src), str(scratch / "runs" / legacy_id))
    # 2. The victim's own root, made first by the other account: <shared_dir>/<victim>/runs.
    own_id, own_src = planted_job(tmp_path / "b", monkeypatch, scratch / me / "runs", marker)
    as_other(uid, gid, "mkdir", "-p", str(scratch / me / "runs"))
    as_other(uid, gid, "cp", "-r", str(own_src), str(scratch / me / "runs" / own_id))
    for planted in (scratch / "runs" / legacy_id, scratch / me / "runs" / own_id):
        assert planted.stat().st_uid == uid and (planted / "submission.json").is_file()

    work = tmp_path / "victim"
    (work / "clusters").mkdir(parents=True)
    (work / "clusters" / "scratch.yaml").write_text("kind: local\ndevice: cpu\n"
                                                    f"shared_dir: {scratch}\n")
    (work / "job.yaml").write_text("name: mine\nlauncher: python\ncommand: [sleep, '1']\n")
    cli = Cli(home=tmp_path / "victim-home", cwd=work)

    listed = cli.run("status", "--json", check=True)
    table = cli.run("status", "--all", check=True)
    time.sleep(2)  # a supervisor started detached would have written the marker by now
    ids = [job["id"] for job in json.loads(listed.stdout)]
    assert legacy_id not in ids and own_id not in ids, ids
    assert legacy_id not in table.stdout and own_id not in table.stdout
    assert not marker.exists(), f"a planted command ran as {me}: {marker.read_text()}"

    doctor = cli.run("doctor", "--json")
    text = doctor.stdout
    assert str(scratch / "runs" / legacy_id) in text, text
    assert str(scratch / me / "runs" / own_id) in text, text
    assert f"uid {uid} ({OTHER})" in text
    assert doctor.returncode == 1
    named = [c["detail"] for c in json.loads(text)["checks"]
             if str(scratch / "runs" / legacy_id) + ":" in c["detail"]]
    assert len(named) == 1, named  # once, by path

    # The victim's own root is the other account's: a submit there is refused, naming it, and runs
    # nothing.
    refused = cli.run("submit", "--cluster", "scratch", "job.yaml")
    assert refused.returncode == 2, refused.stderr
    assert str(scratch / me) in refused.stderr and f"uid {uid} ({OTHER})" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not marker.exists()
    assert json.loads(cli.run("status", "--json", check=True).stdout) == []


def test_a_shared_dir_others_can_write_without_the_sticky_bit_is_refused_at_submit(
        tmp_path: Path, scratch: Path) -> None:
    """The audit's attack on SLURM's ``shared_dir`` (0777, no sticky bit): the other account
    renamed the user's run folder and put its own in its place, whose ``node.sh`` ran as the user.
    Such a folder is refused at submit, naming the fix; with the sticky bit the job runs."""
    shared = scratch / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    work = tmp_path / "victim"
    (work / "clusters").mkdir(parents=True)
    profile = work / "clusters" / "scratch.yaml"
    profile.write_text(f"kind: local\ndevice: cpu\nshared_dir: {shared}\n")
    (work / "job.yaml").write_text("name: mine\nlauncher: python\ncommand: ['true']\n")
    cli = Cli(home=tmp_path / "victim-home", cwd=work)

    refused = cli.run("submit", "--cluster", "scratch", "--wait", "job.yaml", timeout=120)
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    [line] = refused.stderr.strip().splitlines()
    assert f"{profile}: shared_dir: refused {shared}/" in line, line
    assert f"{shared} can be written by others" in line and "mode 0777" in line, line
    assert "sticky bit (chmod +t" in line, line
    assert not any(shared.iterdir()), "a refused submit made something in the shared folder"

    shared.chmod(0o1777)
    ran = cli.run("submit", "--cluster", "scratch", "--wait", "job.yaml", timeout=120)
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
