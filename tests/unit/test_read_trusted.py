"""``places.trust.read_trusted``: a pickle a resume unpickles is checked on the file it opened."""

from __future__ import annotations

import errno
import stat
from pathlib import Path

import pytest

from fsdp_orch.places.trust import UntrustedFile, opened_file_problem, read_trusted

ME, OTHER, ROOT = 1000, 1001, 0


def test_the_users_or_roots_plain_file_closed_to_others_may_be_read() -> None:
    for owner in (ME, ROOT):
        assert opened_file_problem("/c/.metadata", owner, stat.S_IFREG | 0o644, ME) is None


@pytest.mark.parametrize(("owner", "mode", "why"), [
    (OTHER, stat.S_IFREG | 0o644, "is owned by uid 1001"),
    (ME, stat.S_IFREG | 0o664, "can be written by others"),
    (ME, stat.S_IFREG | 0o646, "can be written by others"),
    (ME, stat.S_IFIFO | 0o600, "is not a plain file"),
])
def test_a_file_of_another_or_open_to_others_is_refused(owner: int, mode: int, why: str) -> None:
    problem = opened_file_problem("/c/.metadata", owner, mode, ME)
    assert problem is not None and why in problem and "/c/.metadata" in problem


def test_the_bytes_read_are_those_of_the_file_checked(tmp_path: Path) -> None:
    mine = tmp_path / "rank-0.state.pt"
    mine.write_bytes(b"x" * (3 << 20))
    mine.chmod(0o644)
    assert read_trusted(mine) == b"x" * (3 << 20)
    mine.chmod(0o664)
    with pytest.raises(UntrustedFile, match="can be written by others"):
        read_trusted(mine)


def test_a_link_in_place_of_the_file_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"payload")
    (tmp_path / ".metadata").symlink_to(target)
    with pytest.raises(OSError) as raised:
        read_trusted(tmp_path / ".metadata")
    assert raised.value.errno == errno.ELOOP
