"""A failed save names its I/O error (issue 42): found in the exception's chain, or in the per-rank
failures of DCP's CheckpointException (a BaseException whose text is only the ranks)."""

from __future__ import annotations

import errno

from fsdp_orch.runtime.ckpt_errors import io_cause, save_failed


class CheckpointException(BaseException):  # DCP's shape: rank -> (exception, its traceback)
    def __init__(self, failures: dict) -> None:  # type: ignore[type-arg]
        super().__init__(f"CheckpointException ranks:{failures.keys()}")
        self.failures = failures


def full(path: str = "/ckpt/step-00000010/__0_0.distcp") -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", path)


def test_the_io_error_inside_dcps_exception_is_named_with_the_checkpoint_kept() -> None:
    dcp = CheckpointException({0: (full(), "tb"), 1: (RuntimeError("peer"), "tb")})
    error = save_failed(dcp, 10, "/ckpt/step-00000010", "/ckpt/step-00000005")
    assert str(error) == ("checkpoint save of step 10 failed: no space left on device in "
                          "/ckpt/step-00000010; the previous checkpoint /ckpt/step-00000005 is "
                          "kept")


def test_an_error_raised_from_another_is_found_through_the_chain() -> None:
    try:
        try:
            raise OSError(errno.EROFS, "Read-only file system")
        except OSError as inner:
            raise RuntimeError("write failed") from inner
    except RuntimeError as outer:
        cause = io_cause(outer)
        assert cause is not None and cause.errno == errno.EROFS
        assert "read-only file system in /c/step-1" in str(save_failed(outer, 1, "/c/step-1", None))
        assert "there is no earlier checkpoint" in str(save_failed(outer, 1, "/c/step-1", None))


def test_another_error_keeps_its_own_words() -> None:
    error = save_failed(ValueError("bad shape"), 3, "/c/step-3", None)
    assert "ValueError: bad shape" in str(error) and io_cause(ValueError("x")) is None
    assert io_cause(OSError(errno.ENOENT, "gone")) is None  # not one of the named four
