"""Rank logs kept on the nodes (issue 45, item 5), checked alike on the SLURM test cluster and
the sshd hosts: during steady training the shared run folder sees at most ``MOST_CHANGES_PER_S``
file changes a second (polled: a file appeared, or its mtime or size changed), ``logs`` and
``logs --rank`` still read the ranks' lines, and at the end each node's logs are in the run folder
whole."""

from __future__ import annotations

import collections
import gzip
import os
import re
import time
from pathlib import Path
from typing import Any

POLL_S = 0.1
MOST_CHANGES_PER_S = 3.0
WATCH_S = 15.0


def changes(root: Path, seconds: float) -> collections.Counter[str]:
    """Each file's changes under ``root`` (it appeared, or its mtime or size changed), polled every
    ``POLL_S`` for ``seconds``."""
    def snapshot() -> dict[str, tuple[int, int]]:
        found = {}
        for folder, _, names in os.walk(root):
            for name in names:
                try:
                    st = os.stat(os.path.join(folder, name))
                except OSError:
                    continue
                found[os.path.relpath(os.path.join(folder, name), root)] = (st.st_mtime_ns,
                                                                            st.st_size)
        return found

    counted: collections.Counter[str] = collections.Counter()
    before, end = snapshot(), time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(POLL_S)
        now = snapshot()
        counted.update(name for name, seen in now.items() if before.get(name) != seen)
        before = now
    return counted


def node_logs_not_copied(attempt_dir: Path, job_id: str, nodes: tuple[int, ...]) -> list[str]:
    """The logs that nodes ``nodes`` kept for attempt ``attempt_dir`` (in this machine's node-local
    tmp: the test clusters' nodes share it) whose run-folder copy is not byte for byte the same."""
    local = Path(f"/tmp/fsdp-orch-{os.getuid()}") / job_id / attempt_dir.name
    wrong = []
    for node in nodes:
        kept = local / f"node-{node}"
        pairs = [(kept / "console.log", attempt_dir / f"console-node-{node}.log")]
        pairs += [(path, attempt_dir / f"node-{node}" / path.relative_to(kept / "logs"))
                  for path in (kept / "logs").rglob("*.log")]
        for path, copied in pairs:
            if copied_bytes(copied) != path.read_bytes():
                wrong.append(str(copied))
    return wrong


def copied_bytes(copied: Path) -> bytes | None:
    """A log's run-folder copy, read through its archive (``<name>.gz``: an ended attempt's logs
    are gzipped once the supervisor restarts; these tests' logs are under the size that trims
    them, so the archive holds them whole); None when neither is there."""
    if copied.is_file():
        return copied.read_bytes()
    archived = copied.with_name(copied.name + ".gz")
    return gzip.decompress(archived.read_bytes()) if archived.is_file() else None


def steady_training_checked(cli: Any, job_id: str) -> Path:
    """Once the job trains (step 20), its run folder's changes for ``WATCH_S`` (printed, and held to
    ``MOST_CHANGES_PER_S``) and its lines in ``logs`` and ``logs --rank``; the run folder."""
    status = cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 20
                            or s["state"] not in ("PENDING", "RUNNING"), timeout=300,
                            what="steady training")
    assert status["state"] == "RUNNING", status
    run_dir = Path(status["run_dir"])
    counted = changes(run_dir, WATCH_S)
    rate = sum(counted.values()) / WATCH_S
    print(f"shared run folder: {rate:.2f} file changes/s; {counted.most_common(6)}")
    assert rate <= MOST_CHANGES_PER_S, (rate, counted.most_common())
    # every rank's line reaches the run folder still, a few seconds late
    steps = [int(m) for m in re.findall(r"step=(\d+) ", cli.run("logs", job_id,
                                                                check=True).stdout)]
    assert steps and max(steps) >= 20, steps
    # the demo prints on rank 0 alone, wherever the c10d rendezvous put it (ranks.json)
    assert "step=" in cli.run("logs", job_id, "--rank", "0", check=True).stdout
    assert "step=" not in cli.run("logs", job_id, "--rank", "1", check=True).stdout
    return run_dir
