"""Hostile user values reach the program as literal strings, and no command hidden in them runs.

Each test renders real scripts for a job whose name, script, args, env values, workdir (a real
directory with a hostile name) and checkpoint dir are full of shell syntax, with the profile's
``python:`` pointing at a stub that records what it received; it then runs the scripts with
bash and checks the stub's record value by value, and that no ``PWNED`` file appeared.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from planning import plan_on
from planning import render as render_plan

from fsdp_orch.backends.registry import parse_profile
from fsdp_orch.jobspec.loading import load_job
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.launch.plan_inputs import PlanContext
from fsdp_orch.launch.render import Artifact, write_artifacts
from fsdp_orch.places.builtin import builtin_dir
from fsdp_orch.supervise import SUPERVISOR_MODULE

PAYLOADS = [
    "$(touch PWNED)", "`touch PWNED`", "it's", 'say "hi"', "a;touch PWNED", "a && touch PWNED",
    "a | touch PWNED", "> PWNED", "line1\ntouch PWNED\nline3", "two words", "  padded  ", "\ttab",
    "*", "~", "~/x", "a~b", "back\\slash", "\\", "$HOME", "${IFS}", "#not a comment", "!!",
    "-- --help", "", "é ünicode ☃", "%s%n", "'", '"', "$'\\x41'", "'$(touch PWNED)'",
    "\"$(touch PWNED)\"", "\\$(touch PWNED)",
]
# No line break: a path with a control character is refused (the bad-input table has that case).
HOSTILE = "$(touch PWNED) `touch PWNED` 'q' \"dq\" ;x\\y *~ a&b|c z"
# No line break: a name with a control character is refused (the bad-input table has that case).
NAME = "evil; touch PWNED # $(touch PWNED) `touch PWNED` 'q\" ; x"

STUB = """#!{python}
import json, os, sys
with open({record!r}, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(),
                        "env": {{k: v for k, v in os.environ.items()
                                if k.startswith(("EVIL_", "FSDP_ORCH_", "MASTER_", "RDZV_"))}}}}) \
+ "\\n")
"""


@pytest.fixture
def box(tmp_path: Path) -> dict[str, Path]:
    """A sandbox: a stub 'python' (with a space in its name), a hostile workdir and home."""
    paths = {
        "bin": tmp_path / "bin dir",
        "record": tmp_path / "record.jsonl",
        "workdir": tmp_path / HOSTILE.replace("/", "_"),
        # No line break here: the run dir goes on an #SBATCH line, which cannot hold one.
        "home": tmp_path / "home $(touch PWNED) `touch PWNED` 'q' \"dq\" ;#x\\y *~ 50%",
        "cwd": tmp_path / "cwd",
        "tmp": tmp_path,
    }
    for key in ("bin", "workdir", "home", "cwd"):
        paths[key].mkdir()
    # the job's script is there: each node script checks it before anything starts
    (paths["workdir"] / SCRIPT).write_text("")
    stub = paths["bin"] / "fake python"
    stub.write_text(STUB.format(python=sys.executable, record=str(paths["record"])))
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    paths["stub"] = stub
    return paths


SCRIPT = "train $(touch PWNED) `x`;'q'.py"


def write_job(box: dict[str, Path], **extra: object) -> Path:
    doc = {
        "name": NAME,
        "script": SCRIPT,
        "args": PAYLOADS,
        "env": {f"EVIL_{i}": value for i, value in enumerate(PAYLOADS)},
        "workdir": str(box["workdir"]),
        "checkpoint": {"dir": str(box["tmp"] / "ckpt $(touch PWNED) `x` 'q' \"d\" a~b nl")},
        **extra,
    }
    path = box["tmp"] / "job.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return path


def write_profile(box: dict[str, Path], kind: str, **extra: object) -> Path:
    doc: dict[str, object] = {"kind": kind, "python": str(box["stub"]), **extra}
    if kind == "local":
        doc["device"] = "cpu"
    path = box["tmp"] / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return path


def render(box: dict[str, Path], job_file: Path, profile_file: Path,
           overrides: list[str] | None = None) -> tuple[JobSpec, list[Artifact]]:
    job, _ = load_job(job_file, overrides)
    profile = parse_profile(profile_file)
    ctx = PlanContext(job_id="jinj", attempt=0, run_root=str(box["home"]), job_dir=str(box["tmp"]),
                      supervisor_command=(str(box["stub"]), "-m", SUPERVISOR_MODULE))
    artifacts = render_plan(plan_on(job, profile, profile.kind, ctx),
                            search=[builtin_dir("templates")])
    write_artifacts(artifacts)
    return job, artifacts


def run_script(box: dict[str, Path], art: Artifact, env: dict[str, str] | None = None,
               path_prefix: Path | None = None) -> None:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RDZV_"))}
    full_env.update(env or {})
    if path_prefix is not None:
        full_env["PATH"] = f"{path_prefix}:{full_env['PATH']}"
    proc = subprocess.run(["bash", art.path], cwd=box["cwd"], env=full_env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    if shutil.which("shellcheck"):
        # The excluded notes say "this quoted text will not expand": here that is the point.
        check = subprocess.run(["shellcheck", "--format=gcc", "--exclude=SC2016,SC2088,SC1003",
                                art.path], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout


def records(box: dict[str, Path]) -> list[dict]:
    return [json.loads(line) for line in box["record"].read_text().splitlines()]


def assert_literal(job: JobSpec, record: dict, program: list[str]) -> None:
    argv = record["argv"]
    assert argv[-len(program):] == program, "the program or its args were altered"
    env = record["env"]
    for i, value in enumerate(PAYLOADS):
        assert env[f"EVIL_{i}"] == value
    assert env["FSDP_ORCH_JOB_NAME"] == job.name == NAME
    assert env["FSDP_ORCH_CHECKPOINT_DIR"] == job.checkpoint.dir
    assert Path(record["cwd"]) == Path(job.workdir)


def assert_nothing_ran(box: dict[str, Path]) -> None:
    found = [str(p) for p in box["tmp"].rglob("PWNED")]  # the payloads' own file name, exactly
    assert not found, f"an injected command ran: {found}"
    assert not Path("PWNED").exists()


def comment_lines_hold(art: Artifact) -> None:
    """Shell syntax in the name must not end a comment and start a command: the header (everything
    before ``set -euo pipefail``) stays comment lines, and the name shows in it as written."""
    lines = art.text.splitlines()
    header = lines[:lines.index("set -euo pipefail")]
    assert header and all(line.startswith("#") for line in header), header
    assert any("evil; touch PWNED # $(touch PWNED)" in line for line in header)


@pytest.mark.parametrize("standby", ["auto", "off"])
@pytest.mark.parametrize("launcher", ["torchrun", "accelerate", "python"])
def test_local_launch_script(box: dict[str, Path], launcher: str, standby: str) -> None:
    job, artifacts = render(box, write_job(box), write_profile(box, "local"),
                            [f"launcher={launcher}", f"launch.standby={standby}"])
    (launch,) = [a for a in artifacts if a.name == "launch.sh"]
    comment_lines_hold(launch)
    run_script(box, launch)
    (record,) = records(box)
    assert_literal(job, record, [job.script or "", *PAYLOADS])
    # the warm launcher gets the program after --
    if standby == "auto" and launcher != "accelerate":
        assert record["argv"][:2] == ["-m", "fsdp_orch.standby.launch"], record["argv"]
    else:
        assert record["argv"][0] == {"torchrun": "-u", "accelerate": "-m", "python": "-u"}[launcher]
    assert_nothing_ran(box)


def test_local_command_entry_point(box: dict[str, Path]) -> None:
    """A command entry runs the stub itself: its argv[0..] are hostile too."""
    job_file = write_job(box, script=None, command=[str(box["stub"]), *PAYLOADS[:5]])
    data = yaml.safe_load(job_file.read_text())
    del data["script"]
    job_file.write_text(yaml.safe_dump(data, allow_unicode=True))
    job, artifacts = render(box, job_file, write_profile(box, "local"), ["launcher=python"])
    (launch,) = [a for a in artifacts if a.name == "launch.sh"]
    run_script(box, launch)
    (record,) = records(box)
    assert record["argv"] == [*PAYLOADS[:5], *PAYLOADS]
    assert_literal(job, record, [*PAYLOADS[:5], *PAYLOADS])
    assert_nothing_ran(box)


def test_ssh_node_scripts(box: dict[str, Path]) -> None:
    profile = write_profile(box, "ssh", hosts=[{"address": "127.0.0.1"}, {"address": "localhost"}],
                            device="cpu", remote_workdir=str(box["workdir"]))
    job, artifacts = render(box, write_job(box, nodes=2), profile)
    nodes = [a for a in artifacts if a.name.startswith("node-")]
    assert [a.name for a in nodes] == ["node-0.sh", "node-1.sh"]
    for art in nodes:
        comment_lines_hold(art)
        run_script(box, art)
    got = records(box)
    assert len(got) == 2
    for rank, record in enumerate(got):
        assert_literal(job, record, [job.script or "", *PAYLOADS])
        assert record["env"]["FSDP_ORCH_NODE_RANK"] == str(rank)
    assert_nothing_ran(box)


def test_slurm_node_script(box: dict[str, Path]) -> None:
    job, artifacts = render(box, write_job(box, nodes=2), write_profile(box, "slurm"))
    (node,) = [a for a in artifacts if a.name == "node.sh"]
    comment_lines_hold(node)
    run_script(box, node, {"SLURM_NODEID": "1", "RDZV_HOST": "10.1.2.3"})
    (record,) = records(box)
    assert_literal(job, record, [job.script or "", *PAYLOADS])
    assert record["env"]["FSDP_ORCH_NODE_RANK"] == "1"
    # the rendezvous host reaches the warm standby's launcher (torchrun's --rdzv-endpoint, cold)
    assert "--master-addr 10.1.2.3 " in " ".join(record["argv"]), record["argv"]
    assert_nothing_ran(box)


def test_slurm_node_script_refuses_to_run_outside_a_job_step(box: dict[str, Path]) -> None:
    _, artifacts = render(box, write_job(box, nodes=2), write_profile(box, "slurm"))
    (node,) = [a for a in artifacts if a.name == "node.sh"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RDZV_"))}
    proc = subprocess.run(["bash", node.path], cwd=box["cwd"], env=env, capture_output=True,
                          text=True)
    assert proc.returncode != 0 and "SLURM job step" in proc.stderr
    assert not box["record"].exists()


def test_slurm_batch_script_runs_the_supervisor_with_literal_values(box: dict[str, Path]) -> None:
    """sbatch.sh as SLURM would run it: the hostile job name stays in its comments, and the
    supervisor gets the job id and a run folder with shell syntax in it, literally."""
    _, artifacts = render(box, write_job(box, nodes=2), write_profile(box, "slurm", setup=["true"]))
    (batch,) = [a for a in artifacts if a.name == "sbatch.sh"]
    comment_lines_hold(batch)
    run_script(box, batch, {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node-[a-b]"})
    (record,) = records(box)
    assert record["argv"] == [
        "-m", SUPERVISOR_MODULE, "jinj", "--run-dir", f"{box['home']}/runs/jinj", "--in-allocation"]
    assert_nothing_ran(box)


def test_set_env_value_stays_literal(box: dict[str, Path]) -> None:
    job, artifacts = render(box, write_job(box), write_profile(box, "local"),
                            ["env.EVIL_0=$(touch PWNED) `touch PWNED`", "launcher=python"])
    assert job.env["EVIL_0"] == "$(touch PWNED) `touch PWNED`"
    (launch,) = [a for a in artifacts if a.name == "launch.sh"]
    run_script(box, launch)
    (record,) = records(box)
    assert record["env"]["EVIL_0"] == "$(touch PWNED) `touch PWNED`"
    assert_nothing_ran(box)


def test_tilde_paths_mean_the_nodes_home(box: dict[str, Path]) -> None:
    """Only a leading ~/ in a path we export expands (to the node's $HOME); a ~ elsewhere is
    literal."""
    fake_home = box["tmp"] / "fake home"
    (fake_home / "w").mkdir(parents=True)
    (fake_home / "w" / SCRIPT).write_text("")
    job, artifacts = render(box, write_job(box, workdir="~/w", checkpoint={"dir": "~/ck a~b"}),
                            write_profile(box, "local"), ["launcher=python"])
    (launch,) = [a for a in artifacts if a.name == "launch.sh"]
    run_script(box, launch, {"HOME": str(fake_home)})
    (record,) = records(box)
    assert record["cwd"] == str(fake_home / "w")
    assert record["env"]["FSDP_ORCH_CHECKPOINT_DIR"] == f"{fake_home}/ck a~b"
    assert record["env"]["EVIL_15"] == "a~b" and record["env"]["EVIL_14"] == "~/x"
