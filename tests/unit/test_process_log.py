"""The long-lived processes' own lines through ``logging`` (``vocab.process_log``): the supervisor
writes the line it printed before, byte for byte, to the stream its entry point set up: once."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsdp_orch.supervise.process import run_supervisor
from fsdp_orch.vocab import process_log


@pytest.fixture(autouse=True)
def undone() -> Iterator[None]:
    yield
    process_log.forget()  # the next test finds logging as pytest left it


def no_loop(*args: object, **kwargs: object) -> None:
    raise AssertionError("a job that is not there starts no loop")


def test_the_supervisors_logger_writes_its_line_as_print_did_to_its_stream(tmp_path: Path) -> None:
    stream = io.StringIO()
    process_log.setup(stream)
    assert run_supervisor(no_loop, "j1", run_dir=str(tmp_path / "j1")) == 2
    assert stream.getvalue() == f"fsdp-orch supervisor: no job j1 in {tmp_path}\n"


def test_by_name_the_stream_is_the_one_of_the_moment_as_for_print(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    process_log.setup("stdout")
    later = io.StringIO()  # replaced after the set-up (a forked keeper's, pytest's capture)
    monkeypatch.setattr(sys, "stdout", later)
    run_supervisor(no_loop, "j1", run_dir=str(tmp_path / "j1"))
    assert later.getvalue() == f"fsdp-orch supervisor: no job j1 in {tmp_path}\n"


def test_each_line_is_written_once_at_info_and_above_whatever_the_root_logger_has() -> None:
    stream, root = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(root)
    logging.getLogger().addHandler(handler)
    try:
        process_log.setup(stream)
        logging.getLogger("fsdp_orch.supervise.process").debug("not said")
        logging.getLogger("fsdp_orch.supervise.process").info("said")
        logging.getLogger("__main__").warning("the entry module's")  # run as python -m
        process_log.setup(stream)  # again: replaces, never doubles
        logging.getLogger("fsdp_orch.standby.keeper").error("once")
    finally:
        logging.getLogger().removeHandler(handler)
    assert stream.getvalue() == "said\nthe entry module's\nonce\n"
    assert root.getvalue() == ""


def test_forget_leaves_the_user_programs_main_logger_as_python_does() -> None:
    process_log.setup("stderr")
    process_log.forget()
    for name in process_log.PROCESS_LOGGERS:
        logger = logging.getLogger(name)
        assert (logger.handlers, logger.level, logger.propagate) == ([], logging.NOTSET, True)


def test_the_supervisor_process_says_it_on_its_stdout(tmp_path: Path) -> None:
    """The entry point sets it up: stdout, which the launch sends to ``supervisor.log``."""
    ran = subprocess.run([sys.executable, "-m", "fsdp_orch.supervise.supervisor", "j1",
                          "--run-dir", str(tmp_path / "j1")],
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 2, ran.stderr
    assert (ran.stdout, ran.stderr) == (f"fsdp-orch supervisor: no job j1 in {tmp_path}\n", "")
