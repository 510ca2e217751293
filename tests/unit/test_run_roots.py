"""Run folders under a profile's shared_dir: where they go (``<shared_dir>/<user>/runs``), and how a
second login node (another private home, the same profiles) finds the jobs of the first one."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdp_orch.backends.registry import parse_profile
from fsdp_orch.control.job_control import record_submission
from fsdp_orch.control.submit_request import SubmitRequest
from fsdp_orch.places.builtin import builtin_dir
from fsdp_orch.places.private import user_name
from fsdp_orch.record.index import open_index
from fsdp_orch.record.run_roots import runs_roots, shared_dir_of
from fsdp_orch.record.store import Store
from fsdp_orch.vocab.errors import InputError
from fsdp_orch.vocab.states import JobState


def roots_with(home: str, *shared: Path) -> tuple[list[str], str]:
    """The run roots ``runs_roots`` gives, and the shared dirs it caches, for the project's
    ``shared`` dirs beside those the built-in profiles name (clusters/kubernetes.yaml's)."""
    builtin = {d for p in builtin_dir("clusters").glob("*.yaml") if (d := shared_dir_of(str(p)))}
    dirs = sorted(builtin | {str(d) for d in shared})
    return [f"{home}/runs", *(f"{d}/{user_name()}/runs" for d in dirs)], "\n".join(dirs)


@pytest.fixture
def login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder with a profile whose runs go to a shared folder; the CLI runs from it."""
    project = tmp_path / "project"
    (project / "clusters").mkdir(parents=True)
    (project / "clusters" / "shared.yaml").write_text("kind: local\n"
                                                      f"shared_dir: {tmp_path / 'nfs'}\n")
    (project / "job.yaml").write_text("name: sleeper\nlauncher: python\ncommand: [sleep, '1']\n")
    monkeypatch.chdir(project)
    return tmp_path


def test_a_submission_on_one_login_node_is_listed_by_another_with_its_own_home(login: Path) -> None:
    with open_index(str(login / "home-a")) as a:
        request = SubmitRequest(Path("job.yaml"), "shared")
        job_id, created, submission = record_submission(a, request)
        assert created and submission is not None
        assert submission.run_dir == login / "nfs" / user_name() / "runs" / job_id
        assert not (login / "home-a" / "runs").exists()
        a.journal(job_id).set_state(JobState.CANCELLED, reason="cancelled by user")
    with open_index(str(login / "home-b")) as b:
        b.ingest()
        row = b.store.job(job_id)
    assert row is not None and row.state == "CANCELLED" and row.run_dir == str(submission.run_dir)
    assert (login / "home-a" / "jobs.db").exists() and (login / "home-b" / "jobs.db").exists()


def test_the_roots_follow_the_profiles_and_are_cached_until_a_profile_changes(login: Path) -> None:
    store = Store(login / "cache.db")
    home = str(login / "home")
    roots, shared = roots_with(home, login / "nfs")
    assert runs_roots(store, home) == roots
    assert store.meta_text("shared_dirs") == shared
    profile = Path("clusters") / "shared.yaml"
    profile.write_text(f"kind: local\nshared_dir: {login / 'lustre'}\n")
    import os

    os.utime(profile, ns=(1, 1))  # another mtime than before: the cache key changes
    assert runs_roots(store, home) == roots_with(home, login / "lustre")[0]


def test_shared_dir_must_be_absolute_and_a_broken_profile_names_none(tmp_path: Path) -> None:
    relative = tmp_path / "hpc.yaml"
    relative.write_text("kind: slurm\nshared_dir: relative/runs\n")
    with pytest.raises(InputError) as err:
        parse_profile(relative)
    assert ("shared_dir" in str(err.value) and "absolute" in str(err.value)
            and str(relative) in str(err.value))
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [unclosed\n")
    assert shared_dir_of(str(broken)) is None

