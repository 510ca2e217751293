"""A rank that refuses to start (issue 62): argparse's usage error, python's "can't open file" or
"No module named". Never a cause in a live log (a healthy job's subprocess may print one); at the
exit, the cause when the rank that failed first exited with the status that refusal ends with, and
the logs hold no cause of the user's. Each gets a hint that names what to change."""

from __future__ import annotations

from fsdp_orch.supervise.diagnose import LineScanner, diagnose_text, startup_refusal
from fsdp_orch.supervise.exit_cause import cause_at_exit
from fsdp_orch.vocab.hints import hint_for

# What torchrun's console showed for `--set args=[--stpes,5]` on the demo (two ranks interleaved).
USAGE_LOG = [
    "[default0]:usage: train.py [-h] [--steps STEPS] [--seq-len SEQ_LEN]",
    "[default1]:usage: train.py [-h] [--steps STEPS] [--seq-len SEQ_LEN]",
    "[default0]:                [--batch-size BATCH_SIZE] [--lr LR] [--seed SEED]",
    "[default1]:                [--batch-size BATCH_SIZE] [--lr LR] [--seed SEED]",
    "[default0]:train.py: error: unrecognized arguments: --stpes 5",
    "[default1]:train.py: error: unrecognized arguments: --stpes 5",
    "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 2) local_rank: 0 "
    "(pid: 21929) of binary: /venv/bin/python",
]
ARGPARSE = "train.py: error: unrecognized arguments: --stpes 5"


def test_argparses_error_line_is_the_evidence() -> None:
    result = diagnose_text("\n".join(USAGE_LOG))
    assert result.category == "user_code_error" and not result.retryable
    assert result.evidence == ARGPARSE and result.line == 5
    assert "--set args=" in result.hint


def test_a_usage_error_never_stops_a_live_job() -> None:
    scanner = LineScanner()
    assert [scanner.feed(line) for line in USAGE_LOG] == [None] * len(USAGE_LOG)


def test_at_the_exit_it_is_the_cause_of_a_rank_that_exited_2() -> None:
    # torchrun's summary: rank 0 (local 0) failed first with exit code 2
    result = cause_at_exit(1, None, (0, 0, 2), None, [USAGE_LOG])
    assert (result.category, result.evidence, result.retryable) == (
        "user_code_error", ARGPARSE, False)


def test_a_crash_mid_run_is_not_blamed_on_a_usage_error_printed_earlier() -> None:
    """A subprocess of a healthy job printed a usage error; much later a rank exited 1."""
    log = ["step 1 loss 4.2", *USAGE_LOG[::2], "step 900 loss 1.1"]
    result = cause_at_exit(1, None, (0, 0, 1), None, [log])
    assert result.category == "unknown" and result.evidence == "rank 0 failed first: exited with " \
                                                               "code 1"


def test_a_real_traceback_wins_over_a_usage_error() -> None:
    log = [*USAGE_LOG[:5], "Traceback (most recent call last):",
           '  File "train.py", line 3, in <module>', "KeyError: 'x'"]
    cause = diagnose_text("\n".join(log))
    assert cause.evidence is not None and cause.evidence.startswith("KeyError")
    assert cause_at_exit(1, cause, (0, 0, 2), 0, [log]) is cause


def test_an_error_line_needs_the_usage_before_it() -> None:
    assert startup_refusal(["train.py: error: something"], 2) is None
    far = ["usage: train.py [-h]", *["x"] * 50, "train.py: error: something"]
    assert startup_refusal(far, 2) is None
    assert startup_refusal(["usage: train.py [-h]", "train.py: error: something"], 2) is not None
    assert startup_refusal(["usage: train.py [-h]", "train.py: error: something"], 1) is None


def test_clicks_usage_error() -> None:
    log = ["Usage: train.py [OPTIONS]", "Try 'train.py --help' for help.", "",
           "Error: No such option: --stpes Did you mean --steps?"]
    result = startup_refusal(log, 2)
    assert result is not None and result.evidence == log[-1]


def test_the_interpreters_own_refusals() -> None:
    cannot = ("/usr/bin/python3: can't open file '/work/train.py': [Errno 2] No such file or "
              "directory")
    result = startup_refusal([cannot], 2)
    assert result is not None and result.evidence == cannot and "every node" in result.hint
    denied = "python: can't open file '/work/train.py': [Errno 13] Permission denied"
    result = startup_refusal([denied], 2)
    assert result is not None and "ls -l" in result.hint
    missing = "/venv/bin/python3.11: No module named mypkg.train"
    result = startup_refusal([missing], 1)
    assert result is not None and "pip install" in result.hint
    assert startup_refusal([missing], 2) is None


def test_each_start_up_mistake_has_its_own_hint() -> None:
    generic = hint_for("user_code_error", "KeyError: 'x'")
    for evidence, words in [
        (ARGPARSE, "--set args="),
        ("ModuleNotFoundError: No module named 'wandb' (at train.py:3 in <module>)", "pip install"),
        ("ImportError: cannot import name 'Foo' from 'bar'", "pip install"),
        ("FileNotFoundError: [Errno 2] No such file or directory: 'data/train.bin'", "workdir"),
        ("PermissionError: [Errno 13] Permission denied: '/data/x'", "chmod +x"),
    ]:
        hint = hint_for("user_code_error", evidence)
        assert words in hint and hint != generic, (evidence, hint)
    # only for the user's errors: a checkpoint that is not there stays a checkpoint's hint
    assert "pip install" not in hint_for("checkpoint_error", "No module named 'x'")
