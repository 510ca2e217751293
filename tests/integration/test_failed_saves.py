"""A save that meets a full disk is told by name (issue 42): ``status`` names the I/O error and the
folder of the step that failed, and the checkpoint before it, which is kept. DCP alone said only
``CheckpointException ranks:dict_keys([0, 1])``. A real tmpfs, filled by the test once the job has
committed its first checkpoint there (root: mount)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import Cli, demo_args

pytestmark = pytest.mark.root


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs of this test's own."""
    if os.geteuid() != 0:
        reason = "needs root to mount a filesystem the test can fill"
        if os.environ.get("CI") == "true":
            pytest.fail(f"under CI this test must run: {reason}")
        pytest.skip(reason)
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", str(disk)],
                   check=True, timeout=30)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False, timeout=30)


def fill(disk: Path) -> None:
    """Write zeros until the filesystem is full."""
    with open(disk / "filler", "wb") as out:
        try:
            while True:
                out.write(b"\0" * (1 << 20))
                out.flush()
        except OSError:
            pass


def test_a_save_on_a_full_disk_names_the_error_the_step_and_the_checkpoint_kept(
        cli: Cli, demo: Path, small_disk: Path) -> None:
    job_id = cli.run("submit", "--cluster", "local", str(demo),
                     "--set", demo_args(400, "--sleep-per-step", "0.05"),
                     "--set", "checkpoint.interval=5", "--set", f"checkpoint.dir={small_disk}/ckpt",
                     check=True).stdout.strip()
    first = cli.wait_until(job_id, lambda s: (s.get("last_checkpoint_step") or 0) >= 5,
                           timeout=180, what="a first checkpoint on the small disk")
    fill(small_disk)
    final = cli.wait_until(job_id, lambda s: s["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"),
                           timeout=300, what="the end")
    assert final["state"] == "FAILED", final  # a full disk is not retried into
    [failure] = final["failures"]
    assert failure["category"] == "checkpoint_error", failure
    evidence = failure["evidence"]
    assert f"no space left on device in {small_disk}/ckpt/" in evidence, evidence
    assert "the previous checkpoint" in evidence and "is kept" in evidence, evidence
    assert "CheckpointException ranks" not in evidence, evidence
    assert "no space left on device" in (final["reason"] or ""), final["reason"]
    kept = final["last_checkpoint_step"]
    assert kept >= first["last_checkpoint_step"] and f"step-{kept:08d} is kept" in evidence, (
        kept, evidence)
    assert (small_disk / "ckpt" / f"step-{kept:08d}" / "COMMITTED").exists()
