"""The warm standby's pure parts: the plan's choice of warm or cold and its reason, the environment
a rank gets (torchrun's), the orders' wire format, and torchrun's failure summary as the classifier
reads it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from planning import SUPERVISOR, plan_on, render

from fsdp_orch.backends.registry import parse_profile
from fsdp_orch.jobspec.loading import load_job_text
from fsdp_orch.launch.plan_inputs import PlanContext
from fsdp_orch.places.builtin import builtin_dir
from fsdp_orch.standby.ranks import (
    ATTEMPT_TAG,
    SLACK_BYTES,
    TAG_SLACK,
    Layout,
    RankEnd,
    RankOrder,
    child_argv,
    child_sys_path0,
    decode_orders,
    encode_orders,
    failure_summary,
    hosted_keepers,
    retag_block,
    standby_folder,
    tagged_env,
    torchrun_env,
)
from fsdp_orch.supervise.diagnose import diagnose_lines
from fsdp_orch.supervise.torchrun_summary import torchrun_root_cause

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CTX = PlanContext(job_id="j1", attempt=2, run_root="/h", job_dir="/jobs/demo",
                  supervisor_command=SUPERVISOR)


def plan(kind: str, extra: str = "",  # type: ignore[no-untyped-def]
         entry: str = "script: train.py\n"):
    job = load_job_text("name: demo\n" + entry + extra)
    return plan_on(job, parse_profile(FIXTURES / "clusters" / f"{kind}.yaml"), kind, CTX)


def launch_script(p) -> str:  # type: ignore[no-untyped-def]
    return next(a.text for a in render(p, search=[builtin_dir("templates")])
                if a.name.endswith(".sh"))


@pytest.mark.parametrize("extra,entry", [
    ("", "script: train.py\n"),
    ("launcher: python\n", "script: train.py\n"),
    ("", "module: pkg.train\n"),
])
def test_local_torchrun_and_python_programs_start_warm(extra: str, entry: str) -> None:
    p = plan("local", extra, entry)
    assert p.standby
    assert p.standby_reason.startswith("warm standby:")
    assert "-m fsdp_orch.standby.launch" in launch_script(p)


@pytest.mark.parametrize("kind,extra,entry,why", [
    ("local", "launch:\n  standby: off\n", "script: train.py\n", "launch.standby is off"),
    ("local", "launcher: accelerate\n", "script: train.py\n", "not launcher accelerate"),
    ("local", "", "command: [bash, run.sh]\n", "not a command"),
    ("slurm", "", "script: train.py\n", "run in the profile's container (not built)"),
])
def test_cold_where_the_standby_cannot_apply_with_the_reason(kind: str, extra: str, entry: str,
                                                             why: str) -> None:
    p = plan(kind, extra, entry)
    assert not p.standby
    assert p.standby_reason.startswith("cold start: ") and why in p.standby_reason
    assert "fsdp_orch.standby" not in launch_script(p)


def test_ssh_hosts_start_warm_each_from_keepers_of_its_own() -> None:
    """Each host's launcher prepares the next attempt's keeper, as on local; the keepers' folder
    names the host, so a host that takes a node's place later never claims another's."""
    p = plan("ssh")
    assert p.standby and not p.standby_hosted
    scripts = {a.name: a.text for a in render(p, search=[builtin_dir("templates")])}
    for node in p.nodes:
        script = scripts[f"node-{node.rank}.sh"]
        assert "-m fsdp_orch.standby.launch" in script
        assert f"export FSDP_ORCH_STANDBY_PLACE={node.address}-{node.port}\n" in script
    assert (standby_folder("/tmp/u", "j1", 1, "10.0.0.12-22")
            == "/tmp/u/j1/standby/node-1-10.0.0.12-22")
    assert standby_folder("/tmp/u", "j1", 1) == "/tmp/u/j1/standby/node-1"


def test_slurm_starts_warm_from_the_keeper_host_on_every_node_spares_included() -> None:
    """Without a container: the batch script starts the keeper host's step over every node of the
    allocation before the supervisor, and each node's launcher claims a hosted keeper."""
    p = plan("slurm-standby")
    assert p.standby and p.standby_hosted
    assert "kept ready on every node of the allocation" in p.standby_reason
    artifacts = {a.name: a.text for a in render(p, search=[builtin_dir("templates")])}
    batch = artifacts["sbatch.sh"]
    host = batch.index("-m fsdp_orch.standby.host j1 --nproc")
    assert "srun --overlap --nodes=2 --ntasks-per-node=1" in batch[:host]  # 1 node + 1 spare
    assert host < batch.index("exec ")  # started before the supervisor replaces the shell
    assert "--hosted" in artifacts["node.sh"]


def test_hosted_keepers_newest_first_sockets_before_their_pid_files() -> None:
    names = ["keeper-2.sock.pid", "keeper-10.sock", "keeper-2.log", "keeper-x.sock", "other",
             "keeper-10.sock.pid", "keeper-9.sock"]
    assert hosted_keepers(names) == ["keeper-10.sock", "keeper-10.sock.pid", "keeper-9.sock",
                                     "keeper-2.sock.pid"]


def test_a_rank_gets_torchruns_environment_over_the_attempts() -> None:
    layout = Layout(node_rank=1, nnodes=2, nproc_per_node=4, master_addr="n0", master_port=23456,
                    run_id="j1-a2")
    base = {"FSDP_ORCH_JOB_ID": "j1", "PATH": "/bin", "RANK": "stale"}
    env = torchrun_env(layout, 3, base)
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "LOCAL_WORLD_SIZE",
                                "WORLD_SIZE",
                                "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                "TORCHELASTIC_RUN_ID",
                                "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                                "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS")} == {
        "RANK": "7", "LOCAL_RANK": "3", "GROUP_RANK": "1", "ROLE_RANK": "7",
        "LOCAL_WORLD_SIZE": "4",
        "WORLD_SIZE": "8", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "n0", "MASTER_PORT": "23456",
        "TORCHELASTIC_RUN_ID": "j1-a2", "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "True", "OMP_NUM_THREADS": "1"}
    assert env["FSDP_ORCH_JOB_ID"] == "j1" and env["PATH"] == "/bin"
    assert base["RANK"] == "stale"  # the launcher's own environment is not changed


def test_the_users_thread_count_wins_and_one_rank_gets_none() -> None:
    layout = Layout(0, 1, 1, "h", 1, "r")
    assert "OMP_NUM_THREADS" not in torchrun_env(layout, 0, {})
    assert (torchrun_env(Layout(0, 1, 2, "h", 1, "r"), 0,
                         {"OMP_NUM_THREADS": "8"})["OMP_NUM_THREADS"] == "8")


def test_orders_survive_the_wire() -> None:
    orders = [RankOrder(0, "script", ["t.py", "--x", "é"], "/w", {"A": "1"}),
              RankOrder(1, "module", ["pkg.m"], "/w", {}, unbuffered=True)]
    assert decode_orders(encode_orders(orders)) == orders


def test_sys_argv_and_path_as_python_sets_them(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    assert child_argv("script", ["sub/t.py", "--a"]) == ["sub/t.py", "--a"]
    assert child_argv("module", ["pkg.m", "--a"]) == ["-m", "--a"]
    assert (child_sys_path0("script", ["sub/t.py"], str(tmp_path))
            == str((tmp_path / "sub").resolve()))
    assert child_sys_path0("module", ["pkg.m"], str(tmp_path)) == str(tmp_path)


def test_the_failure_summary_reads_as_torchruns() -> None:
    first = RankEnd(local_rank=1, rank=5, code=-9, pid=42, at="2026-01-01_00:00:00")
    other = RankEnd(local_rank=0, rank=4, code=-15, pid=41, at="2026-01-01_00:00:01")
    text = failure_summary("/usr/bin/python", "train.py", first, [other], "host")
    assert torchrun_root_cause(text.splitlines()) == (5, 1, -9)
    assert "train.py FAILED" in text
    assert diagnose_lines(text.splitlines()).category == "killed_sigkill"


def test_a_bad_setting_names_the_field_and_the_choices() -> None:
    from fsdp_orch.vocab.errors import InputError

    with pytest.raises(InputError, match=r"launch\.standby: expected 'auto' or 'off'; got 'warm'"):
        load_job_text("name: demo\nscript: train.py\nlaunch:\n  standby: warm\n")


@pytest.mark.parametrize("nnodes,code", [(1, 75), (2, 1)])
def test_a_node_that_cannot_start_warm_goes_cold_alone_or_fails_the_attempt(nnodes, code, caplog):
    """Of several nodes, the others start from their keepers: a cold torchrun here would wait in a
    c10d rendezvous nobody joins, so the attempt fails at once instead."""
    from fsdp_orch.standby.launch import cold_or_fail, parse

    args = parse(["--mode", "torchrun", "--node", "1", "--nnodes", str(nnodes), "--entry",
                  "script", "--", "train.py"])
    assert cold_or_fail(args, "the keeper (pid 7) ended before it was ready") == code
    said = "\n".join(caplog.messages)  # the launcher's log (vocab.process_log: its stderr)
    assert ("starting cold" in said) == (nnodes == 1), said
    assert ("node 1 of 2 cannot start warm" in said) == (nnodes == 2), said


def block_of(env: dict[str, str]) -> bytes:
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())


def apply(block: bytes, attempt: int) -> bytes:
    plan = retag_block(block, attempt)
    assert not isinstance(plan, str), plan
    return block[:plan.offset] + plan.data + block[plan.offset + len(plan.data):]


@pytest.mark.parametrize("before,after", [(0, 1), (9, 10), (9, 12345), (12, 3)])
def test_a_successor_retags_the_environment_block_in_place_keeping_its_length(before, after):
    env = tagged_env({"FSDP_ORCH_JOB_ID": "j1", ATTEMPT_TAG: "stale", "PATH": "/bin"}, before)
    assert list(env)[-2:] == [ATTEMPT_TAG, TAG_SLACK]  # last, in the order the block keeps
    block = block_of(env)
    new = apply(block, after)
    assert len(new) == len(block)
    entries = new.split(b"\0")
    assert f"{ATTEMPT_TAG}={after}".encode() in entries
    assert f"{ATTEMPT_TAG}={before}".encode() not in entries
    assert entries[:2] == [b"FSDP_ORCH_JOB_ID=j1", b"PATH=/bin"]
    plan = retag_block(block, after)
    assert not isinstance(plan, str)
    assert new[plan.slack_now:].startswith(f"{TAG_SLACK}=".encode())  # where its pointer goes
    assert block[plan.slack_was:].startswith(f"{TAG_SLACK}=".encode())
    assert apply(new, before) == block  # and back: attempt after attempt, the same room


def test_no_retag_without_the_slack_or_past_its_room() -> None:
    assert "does not end with" in str(retag_block(block_of({ATTEMPT_TAG: "1", "A": "b"}), 2))
    block = block_of(tagged_env({}, 1))
    assert "no room left" in str(retag_block(block, 10 ** (SLACK_BYTES + 1)))


RETAG_IN_A_REAL_PROCESS = """
import ctypes, os, sys
from fsdp_orch.standby.successor import retag_environ
assert retag_environ(int(sys.argv[1])) is None
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
environ = ctypes.POINTER(ctypes.c_char_p).in_dll(libc, "environ")
entries = []
while environ[len(entries)]:
    entries.append(environ[len(entries)])
print(libc.getenv(b"FSDP_ORCH_ATTEMPT").decode(), libc.getenv(b"FSDP_ORCH_STANDBY_SLACK").decode(),
      os.environ["FSDP_ORCH_ATTEMPT"], all(b"=" in e for e in entries), flush=True)
sys.stdin.read()
"""


def test_the_retag_is_what_proc_environ_reads_and_the_c_environment_stays_whole() -> None:
    """What ``stop_job_processes`` reads (another process's ``/proc/<pid>/environ``) and what the
    process's own C environment and ``os.environ`` say, after a retag from attempt 9 to 10."""
    env = tagged_env({k: v for k, v in os.environ.items() if k != "FSDP_ORCH_RUN_DIR"}, 9)
    proc = subprocess.Popen([sys.executable, "-c", RETAG_IN_A_REAL_PROCESS, "10"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        said = proc.stdout.readline().split()
        entries = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
    finally:
        proc.communicate("")
    assert said == ["10", "." * (SLACK_BYTES - 1), "10", "True"], said
    assert b"FSDP_ORCH_ATTEMPT=10" in entries and b"FSDP_ORCH_ATTEMPT=9" not in entries
    assert proc.returncode == 0
