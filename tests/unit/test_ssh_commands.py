"""The shell lines the SSH kind sends to a host, run here by bash as sshd would run them: a node
script started detached in a session of its own with its exit status recorded, and the sweep that
stops a job's processes. Paths with shell syntax in them stay literal."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fsdp_orch.backends.over_ssh.attempt import exit_file, start_command, stop_command


def test_a_node_script_starts_detached_in_its_own_session_and_records_its_exit(
        tmp_path: Path) -> None:
    attempt_dir = tmp_path / "run $(touch PWNED) 'q'" / "attempt-0"
    attempt_dir.mkdir(parents=True)
    (attempt_dir / "node-1.sh").write_text("echo from node 1; sleep 2; exit 3\n")
    out = subprocess.run(["bash", "-c", start_command(str(attempt_dir), 1)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=30)
    pid = int(out.stdout.strip())
    deadline = time.monotonic() + 10
    # `setsid` runs just after the echo
    while os.getsid(pid) != pid and time.monotonic() < deadline:
        time.sleep(0.01)
    # its own session: the whole tree can be stopped, SSH's end does not
    assert os.getsid(pid) == pid
    while not Path(exit_file(str(attempt_dir), 1)).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert Path(exit_file(str(attempt_dir), 1)).read_text().strip() == "3"
    assert (attempt_dir / "console-node-1.log").read_text() == "from node 1\n"
    assert not (tmp_path / "PWNED").exists()
    # made under umask 077 whatever the SSH session's umask: the host's copies are private
    for made in (attempt_dir / "console-node-1.log", Path(exit_file(str(attempt_dir), 1))):
        assert made.stat().st_mode & 0o077 == 0, made


def test_a_node_that_keeps_its_logs_has_them_copied_before_its_exit_status(
        tmp_path: Path) -> None:
    """The wrapper runs the copy command after the node script and before it records the exit
    status: once the supervisor sees the status, the run folder holds the whole of the logs."""
    attempt_dir = tmp_path / "attempt-0"
    attempt_dir.mkdir()
    (attempt_dir / "node-0.sh").write_text("echo before the node keeps its console\nexit 0\n")
    at_end = f"sleep 1; echo copied > {tmp_path / 'copied'}"
    out = subprocess.run(["bash", "-c", start_command(str(attempt_dir), 0, at_end)],
                         capture_output=True, text=True, timeout=30)
    assert int(out.stdout.strip()) > 0
    deadline = time.monotonic() + 20
    while not Path(exit_file(str(attempt_dir), 0)).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "copied").read_text() == "copied\n"  # there before the status
    assert Path(exit_file(str(attempt_dir), 0)).read_text().strip() == "0"
    assert (attempt_dir / "ssh-node-0.log").read_text() == "before the node keeps its console\n"
    assert not (attempt_dir / "console-node-0.log").exists()  # the node's copy is that name's


def test_the_stop_sweep_copies_a_stopped_nodes_logs_whole(tmp_path: Path) -> None:
    """Stopped, a node's wrapper dies with its script: the stop command copies its logs."""
    env = {**os.environ, "FSDP_ORCH_JOB_ID": "jlogs", "FSDP_ORCH_ATTEMPT": "1",
           "FSDP_ORCH_NODE_TMP": str(tmp_path / "node-tmp")}
    folder = tmp_path / "node-tmp" / "jlogs" / "attempt-1" / "node-0"
    folder.mkdir(parents=True)
    (folder / "console.log").write_text("the hang's last lines\n")
    attempt_dir = tmp_path / "run" / "attempt-1"
    (attempt_dir / "node-0").mkdir(parents=True)
    (attempt_dir / "node-0" / "node_tmp_moved").write_text(str(tmp_path / "node-tmp"))
    worker = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    try:
        subprocess.run(["bash", "-c", stop_command(sys.executable, "jlogs", 1, None, 1.0,
                                                   (str(attempt_dir), 0))],
                       check=True, timeout=60)
        assert worker.wait(timeout=10) is not None
    finally:
        worker.kill()
        worker.wait()
    assert (attempt_dir / "console-node-0.log").read_text() == "the hang's last lines\n"


def test_the_stop_sweep_ends_every_process_of_the_job_and_attempt(tmp_path: Path) -> None:
    env = {**os.environ, "FSDP_ORCH_JOB_ID": "job'x", "FSDP_ORCH_ATTEMPT": "2"}
    worker = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    other_attempt = subprocess.Popen(["sleep", "60"], env={**env, "FSDP_ORCH_ATTEMPT": "1"})
    try:
        subprocess.run(["bash", "-c", stop_command(sys.executable, "job'x", 2, None, 1.0)],
                       check=True, timeout=60)
        assert worker.wait(timeout=10) is not None
        assert other_attempt.poll() is None  # another attempt's process is not this sweep's
        subprocess.run(["bash", "-c", stop_command(sys.executable, "job'x", None, None, 1.0)],
                       check=True, timeout=60)
        assert other_attempt.wait(timeout=10) is not None  # no attempt given: the whole job
    finally:
        for proc in (worker, other_attempt):
            proc.kill()
            proc.wait()
