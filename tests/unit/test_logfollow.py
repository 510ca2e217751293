"""Following an attempt's logs: causes found as lines arrive, and torchrun's summary read after."""

from __future__ import annotations

from pathlib import Path

from fsdp_orch.observe.file_tail import FileTail
from fsdp_orch.supervise.logfollow import LogFollower

GLOO = ("[default0]:[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] "
        "Read error [127.0.0.1]:10401: Connection reset by peer.\n")
SUMMARY = """Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 8630)  (SIGKILL)
=======================================================
"""


def test_a_lost_peer_is_seen_and_the_later_summary_still_read(tmp_path: Path):
    console = tmp_path / "console-node-0.log"
    console.write_text("[default0]:step=11 loss=2.0\n" + GLOO)
    follower = LogFollower(FileTail(tmp_path).chunks)
    cause = follower.poll()
    assert cause is not None and cause.category == "gloo_timeout_or_peer_lost"
    assert follower.cause_rank() == 0
    with console.open("a") as f:
        f.write(SUMMARY)
    assert follower.poll(final=True) is cause  # the first cause stays...
    assert follower.root_cause_rank() == (1, 1, -9)  # ...and the summary that outranks it is read


def test_a_half_written_line_waits_for_its_end(tmp_path: Path):
    log = tmp_path / "console-node-0.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of mem")
    follower = LogFollower(FileTail(tmp_path).chunks)
    assert follower.poll() is None
    with log.open("a") as f:
        f.write("ory. Tried to allocate 2.00 GiB\n")
    cause = follower.poll()
    assert cause is not None and cause.category == "cuda_oom"
    assert cause.evidence == (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")


def test_per_rank_files_name_their_rank(tmp_path: Path):
    rank_dir = tmp_path / "node-0" / "run_x" / "attempt_0" / "1"
    rank_dir.mkdir(parents=True)
    (rank_dir / "stderr.log").write_text("Traceback (most recent call last):\n"
                                         "  File \"t.py\", line 1\nKeyError: 'tokens'\n")
    follower = LogFollower(FileTail(tmp_path).chunks)
    cause = follower.poll()
    assert cause is not None and cause.category == "user_code_error" and follower.cause_rank() == 1


def test_a_bare_exception_line_never_stops_the_restarts(tmp_path: Path):
    """`diagnose` reads a lone "ValueError: ..." as the user's (a cut excerpt); the supervisor does
    not: a handled error a library logged must not make a crash look like a bug that is not
    retried."""
    (tmp_path / "console-node-0.log").write_text("[default0]:ValueError: bad value, using "
                                                  "the default\n[default0]:step=3 loss=2.0\n")
    follower = LogFollower(FileTail(tmp_path).chunks)
    assert follower.poll(final=True) is None
