"""Cluster profiles: the built-in ones, discovery order and origin, template overrides,
launcher/kind compatibility, and the checks each kind makes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planning import plan_on

from fsdp_orch.backends.registry import KINDS, load_profile, parse_profile, profile_models
from fsdp_orch.cli import main as cli
from fsdp_orch.control.planning import plan_job
from fsdp_orch.jobspec.loading import load_job_text
from fsdp_orch.jobspec.profiles import (
    discover,
)
from fsdp_orch.jobspec.schema import LAUNCHERS
from fsdp_orch.launch.plan_inputs import PlanContext
from fsdp_orch.launch.render import template_dirs
from fsdp_orch.places.builtin import builtin_dir
from fsdp_orch.vocab.errors import InputError

JOB = "name: demo\nscript: train.py\n"


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    cwd, home = tmp_path / "project", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("FSDP_ORCH_HOME", str(home))
    (cwd / "job.yaml").write_text(JOB)
    return {"cwd": cwd, "home": home}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_builtin_profiles_are_valid(kind: str) -> None:
    profile = parse_profile(builtin_dir("clusters") / f"{kind}.yaml")
    assert profile.kind == kind and profile.description


def test_builtin_dir_is_the_repo_in_a_checkout() -> None:
    assert sorted(p.stem for p in builtin_dir("clusters").glob("*.yaml")) == sorted(KINDS)
    assert (builtin_dir("templates") / "local.sh.j2").is_file()


def test_discovery_order_project_home_builtin(sandbox: dict[str, Path]) -> None:
    write(sandbox["cwd"] / "clusters" / "local.yaml", "kind: local\ndescription: project local\n")
    write(sandbox["cwd"] / "clusters" / "lab.yml", "kind: local\n")
    write(sandbox["home"] / "clusters" / "local.yaml", "kind: local\ndescription: home local\n")
    write(sandbox["home"] / "clusters" / "slurm.yaml", "kind: slurm\ndescription: home slurm\n")
    write(sandbox["home"] / "clusters" / "team.yaml", "kind: local\n")
    write(sandbox["home"] / "clusters" / "notes.txt", "not a profile")
    refs = discover()
    assert {n: r.origin for n, r in refs.items()} == {
        "local": "project", "lab": "project", "slurm": "home", "team": "home",
        "ssh": "built-in", "tpu-vm": "built-in", "kubernetes": "built-in"}
    assert load_profile("local")[0].description == "project local"
    assert load_profile("slurm")[0].description == "home slurm"
    assert load_profile("ssh")[1].path == builtin_dir("clusters") / "ssh.yaml"


def test_profile_by_path(sandbox: dict[str, Path]) -> None:
    path = write(sandbox["cwd"] / "elsewhere" / "mine.yaml", "kind: local\n")
    profile, ref = load_profile(str(path))
    assert (profile.kind, ref.name, ref.origin) == ("local", "mine", "path")


def test_clusters_command_shows_origin(sandbox: dict[str, Path],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    write(sandbox["cwd"] / "clusters" / "local.yaml", "kind: local\n")
    write(sandbox["home"] / "clusters" / "team.yaml", "kind: slurm\n")
    write(sandbox["home"] / "clusters" / "broken.yaml", "kind: slurm\npartiton: x\n")
    assert cli.main(["clusters", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert {n: (r["kind"], r["origin"]) for n, r in rows.items()} == {
        "local": ("local", "project"), "team": ("slurm", "home"), "broken": ("?", "home"),
        "slurm": ("slurm", "built-in"), "ssh": ("ssh", "built-in"),
        "tpu-vm": ("tpu-vm", "built-in"), "kubernetes": ("kubernetes", "built-in")}
    assert "did you mean 'partition'" in rows["broken"]["description"]
    assert cli.main(["clusters"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAME", "KIND", "ORIGIN", "PATH"]
    assert any(line.split()[:3] == ["local", "local", "project"] for line in table)
    assert any(line.split()[:3] == ["ssh", "ssh", "built-in"] for line in table)
    # the broken one's reason under the table, naming its file and field (it showed only "?")
    assert any(line.startswith("invalid: ") and "broken.yaml:2: partiton: unknown field" in line
               for line in table), table


# --- templates: discovery and a profile's own template ---------------------------------------

def test_template_dirs_order(sandbox: dict[str, Path]) -> None:
    (sandbox["cwd"] / "templates").mkdir()
    (sandbox["home"] / "templates").mkdir()
    assert template_dirs() == [sandbox["cwd"] / "templates", sandbox["home"] / "templates",
                               builtin_dir("templates")]


def test_project_and_home_templates_override_builtin(sandbox: dict[str, Path]) -> None:
    write(sandbox["home"] / "templates" / "local.sh.j2", "# home template {{ plan.world_size }}\n")
    write(sandbox["home"] / "templates" / "slurm.sbatch.j2", "# home sbatch {{ plan.nnodes }}\n")
    write(sandbox["cwd"] / "templates" / "local.sh.j2",
          "# project template {{ plan.job.name | q }}\n")
    local = {a.name: a.text for a in plan_job(Path("job.yaml"), "local").artifacts}
    assert local["launch.sh"] == "# project template demo\n"
    slurm = {a.name: a.text for a in plan_job(Path("job.yaml"), "slurm").artifacts}
    assert slurm["sbatch.sh"] == "# home sbatch 1\n"
    assert slurm["node.sh"].startswith("#!/usr/bin/env bash")  # not overridden: built-in


def test_profile_template_replaces_the_main_template(sandbox: dict[str, Path]) -> None:
    write(sandbox["cwd"] / "clusters" / "custom.sh.j2",
          '{% set what = "custom" %}{% include "_preamble.sh.j2" %}echo {{ plan.job.name | q }}\n')
    write(sandbox["cwd"] / "clusters" / "mine.yaml", "kind: slurm\ntemplate: custom.sh.j2\n")
    arts = {a.name: a.text for a in plan_job(Path("job.yaml"), "mine").artifacts}
    assert arts["node.sh"].startswith("#!/usr/bin/env bash\n# Generated by fsdp-orch")
    assert arts["node.sh"].endswith("echo demo\n")
    assert "#SBATCH --nodes=1" in arts["sbatch.sh"]  # the batch script is still the built-in one


def test_profile_template_errors(sandbox: dict[str, Path]) -> None:
    write(sandbox["cwd"] / "clusters" / "bad.sh.j2", "{{ plan.no_such_field }}\n")
    write(sandbox["cwd"] / "clusters" / "bad.yaml", "kind: local\ntemplate: bad.sh.j2\n")
    with pytest.raises(InputError, match="undefined value"):
        plan_job(Path("job.yaml"), "bad")
    write(sandbox["cwd"] / "clusters" / "bad.sh.j2", "{% if %}\n")
    with pytest.raises(InputError, match="template syntax error"):
        plan_job(Path("job.yaml"), "bad")


# --- launcher x kind --------------------------------------------------------------------------

COMPATIBLE = {
    "local": {"torchrun", "accelerate", "python"}, "slurm": {"torchrun", "accelerate", "python"},
    "ssh": {"torchrun", "accelerate", "python"}, "tpu-vm": {"xla", "python"},
    "kubernetes": {"torchrun", "accelerate", "python"},
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_launcher_kind_compatibility(kind: str, launcher: str) -> None:
    profile = parse_profile(builtin_dir("clusters") / f"{kind}.yaml")
    job = load_job_text(JOB + f"launcher: {launcher}\n")
    assert set(profile_models()[kind].launchers) == COMPATIBLE[kind]
    if launcher in COMPATIBLE[kind]:
        plan_on(job, profile, kind)
    else:
        with pytest.raises(InputError) as info:
            plan_on(job, profile, kind)
        assert info.value.field == "launcher"
        assert f"launcher {launcher!r} cannot run on cluster {kind!r}" in info.value.detail


def test_node_counts_per_kind() -> None:
    ssh = parse_profile(builtin_dir("clusters") / "ssh.yaml")  # two hosts
    with pytest.raises(InputError, match="lists 2 host"):
        plan_on(load_job_text(JOB + "nodes: 3\n"), ssh, "ssh")
    tpu = parse_profile(builtin_dir("clusters") / "tpu-vm.yaml")  # four workers
    for nodes in (1, 4):
        plan_on(load_job_text(JOB + f"nodes: {nodes}\nlauncher: xla\n"), tpu, "tpu-vm")
    with pytest.raises(InputError, match="expected nodes: 1 or 4"):
        plan_on(load_job_text(JOB + "nodes: 2\nlauncher: xla\n"), tpu, "tpu-vm")


# --- profile fields ---------------------------------------------------------------------------

def profile(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    return parse_profile(write(tmp_path / "p.yaml", text))


def profile_error(tmp_path: Path, text: str) -> InputError:
    with pytest.raises(InputError) as info:
        profile(tmp_path, text)
    return info.value


@pytest.mark.parametrize("time", ['"30"', '"04:00:00"', '"2-00:00:00"', '"1-12"', '"90:00"'])
def test_slurm_time_accepted(tmp_path: Path, time: str) -> None:
    assert profile(tmp_path, f"kind: slurm\ntime: {time}\n").time == time.strip('"')


@pytest.mark.parametrize(("time", "fragment"), [
    ("30", "quoted SLURM time limit"), ("1:00:00", "unquoted, YAML reads 1:00:00 as a number"),
    ('"an hour"', "SLURM time limit like 30"), ('"1:2:3:4"', "SLURM time limit like 30"),
])
def test_slurm_time_refused(tmp_path: Path, time: str, fragment: str) -> None:
    err = profile_error(tmp_path, f"kind: slurm\ntime: {time}\n")
    assert err.field == "time" and fragment in err.detail and err.line == 2


def test_unknown_profile_key_hint(tmp_path: Path) -> None:
    err = profile_error(tmp_path, "kind: ssh\nhosts: [{address: a, prot: 22}]\n")
    assert (err.field, err.line) == ("hosts.0.prot", 2)
    assert "did you mean 'port'?" in err.detail


def test_profile_kind_missing(tmp_path: Path) -> None:
    err = profile_error(tmp_path, "description: x\n")
    assert err.field == "kind"
    assert "expected one of local, slurm, ssh, tpu-vm, kubernetes" in err.detail


def test_ssh_checks(tmp_path: Path) -> None:
    assert "expected a host name" in profile_error(tmp_path,
                                                   "kind: ssh\nhosts: [{address: 'a;b'}]\n").detail
    assert profile_error(tmp_path, "kind: ssh\nhosts: []\n").field == "hosts"
    p = profile(tmp_path, "kind: ssh\nhosts: [{address: a}]\nvenv: /v/\n")
    assert p.python == "/v/bin/python" and p.host_key_policy == "strict"


def test_profile_env_keeps_text_and_checks_names(tmp_path: Path) -> None:
    p = profile(tmp_path, "kind: local\nenv: {OMP_NUM_THREADS: 1, V: 3.10}\n")
    assert p.env == {"OMP_NUM_THREADS": "1", "V": "3.10"}
    assert ("not a valid shell name"
            in profile_error(tmp_path, "kind: local\nenv: {A-B: 1}\n").detail)


def test_sbatch_extra_names(tmp_path: Path) -> None:
    assert "not an option name" in profile_error(tmp_path,
                                                 "kind: slurm\nsbatch_extra: {'--x': 1}\n").detail


def test_local_python_defaults_to_this_interpreter(tmp_path: Path) -> None:
    import sys

    assert profile(tmp_path, "kind: local\n").python == sys.executable


def test_the_job_env_wins_over_the_profile_env(tmp_path: Path) -> None:
    p = profile(tmp_path, "kind: local\nenv: {A: profile, B: profile, C: profile}\npython: /py\n")
    job = load_job_text(JOB + "env: {B: job, C: {from_env: MY_C}}\n")
    plan = plan_on(job, p, "x", PlanContext(job_id="j", attempt=0, run_root="/h", job_dir="/j"))
    env = plan.env
    assert env.index(("A", "profile")) < env.index(("B", "job"))
    assert ("B", "profile") not in env
    # a job's reference replaces the profile's plain value: nothing exported would override it
    assert [name for name, _ in env].count("C") == 0 and plan.secret_env == [("C", "from_env MY_C")]
