"""``fsdp-orch logs --rank N`` under every launcher: a rank's own lines where the launcher tags
them, the node's log where the rank is its node's only process, and otherwise a line that says which
logs the attempt has and where rank N's output went."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import pytest

from fsdp_orch.control.logs import show_logs
from fsdp_orch.record.index import JobIndex
from fsdp_orch.record.store import Store
from fsdp_orch.vocab.errors import InputError

NODE_LOGS = {  # 2 nodes x 2 ranks; torchrun and accelerate tag each line with its local rank
    "tagged": ["[default0]:step 1 on rank 0\n[default1]:step 1 on rank 1\n",
               "[default0]:step 1 on rank 2\n[default1]:step 1 on rank 3\n"],
    "untagged": ["step 1 on rank 0\nstep 1 on rank 1\n", "step 1 on rank 2\nstep 1 on rank 3\n"],
}


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """``job(launcher, logs)``: an index holding one job of 2 nodes x 2 ranks whose attempt 0 left
    those node logs; returns ``logs(**options)``, what ``show_logs`` prints."""
    monkeypatch.setenv("FSDP_ORCH_HOME", str(tmp_path / "home"))
    index = JobIndex(Store(tmp_path / "jobs.db"), [str(tmp_path / "runs")], warn=lambda text: None)

    def make(launcher: str, logs: str, nproc: int = 2):  # type: ignore[no-untyped-def]
        run_dir = tmp_path / "runs" / "j1"
        spec = {"launcher": launcher,
                "_resolved": {"nproc_per_node": nproc, "world_size": 2 * nproc}}
        index.journal("j1", role="submit", run_dir=str(run_dir)).submitted(
            name="n", cluster="c", kind="local", spec_json=json.dumps(spec), run_dir=str(run_dir),
            job_file=None, spec_hash=None, idempotency_key=None)
        (run_dir / "attempt-0").mkdir(parents=True)
        for node, text in enumerate(NODE_LOGS[logs]):
            (run_dir / "attempt-0" / f"console-node-{node}.log").write_text(text)

        def show(**options: object) -> str:
            out = io.StringIO()
            assert show_logs(index, "j1", out=out, **options) == 0  # type: ignore[arg-type]
            return out.getvalue()
        return show
    return make


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_a_launcher_that_tags_lines_gives_the_rank_its_own(job,  # type: ignore[no-untyped-def]
                                                           launcher: str) -> None:
    assert job(launcher, "tagged")(rank=3) == "step 1 on rank 3\n"


def test_a_rank_is_read_on_the_node_the_attempt_placed_it(job,  # type: ignore[no-untyped-def]
                                                          tmp_path: Path) -> None:
    """torchrun's c10d rendezvous put ranks 0-1 on node 1 and ranks 2-3 on node 0 (the supervisor
    wrote it in ranks.json, from the node agents' heartbeats)."""
    show = job("torchrun", "tagged")
    (tmp_path / "runs" / "j1" / "attempt-0" / "ranks.json").write_text(
        json.dumps({"nodes": {"0": 1, "1": 1, "2": 0, "3": 0}}))
    assert show(rank=3) == "step 1 on rank 1\n"  # node 0's local rank 1
    assert show(rank=0) == "step 1 on rank 2\n"  # node 1's local rank 0


def test_under_launcher_python_the_rank_is_pointed_to_its_node_log(  # type: ignore[no-untyped-def]
        job) -> None:
    said = job("python", "untagged")(rank=3)
    assert said == ("[fsdp-orch] attempt 0 has the logs of nodes 0, 1: launcher: python runs one "
                    "process per node, which starts its ranks itself, so rank 3 has no log of its "
                    "own: its output is in node 1's log, with the other ranks of that node "
                    "(fsdp-orch logs j1 --node 1)\n")


def test_node_shows_one_node_log(job) -> None:  # type: ignore[no-untyped-def]
    assert job("python", "untagged")(node=1) == NODE_LOGS["untagged"][1]


def test_a_rank_alone_on_its_node_has_the_node_log(job) -> None:  # type: ignore[no-untyped-def]
    assert job("xla", "untagged", nproc=1)(rank=1) == NODE_LOGS["untagged"][1]


def test_a_log_written_without_tags_says_so(job) -> None:  # type: ignore[no-untyped-def]
    """An accelerate job's log from before its launcher tagged lines: nothing to filter by."""
    assert job("accelerate", "untagged")(rank=1) == (
        "[fsdp-orch] rank 1 wrote nothing to node 0's log in attempt 0: its lines are not "
        "tagged with their ranks (fsdp-orch logs j1 --node 0 --attempt 0)\n")


@pytest.mark.parametrize(("options", "message"), [
    ({"rank": 4}, "--rank: job j1 has ranks 0-3, not 4"),
    ({"node": 2}, "--node: attempt 0 has the logs of nodes 0, 1, none of node 2"),
    ({"rank": 1, "node": 0}, "expected one of --rank or --node, not both"),
])
def test_what_is_not_there_is_an_input_error(job,  # type: ignore[no-untyped-def]
                                             options: dict,  # type: ignore[type-arg]
                                             message: str) -> None:
    with pytest.raises(InputError, match=message):
        job("torchrun", "tagged")(**options)


def test_following_a_numbered_attempt_ends_once_a_later_attempt_begins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job goes on (attempt 1 runs), but attempt 0's output no longer grows: ``logs --follow
    --attempt 0`` prints all of it and ends, where it used to wait for the job's end forever."""
    monkeypatch.setenv("FSDP_ORCH_HOME", str(tmp_path / "home"))
    index = JobIndex(Store(tmp_path / "jobs.db"), [str(tmp_path / "runs")], warn=lambda text: None)
    run_dir = tmp_path / "runs" / "j1"
    index.journal("j1", role="submit", run_dir=str(run_dir)).submitted(
        name="n", cluster="c", kind="local", spec_json="{}", run_dir=str(run_dir), job_file=None,
        spec_hash=None, idempotency_key=None)
    (run_dir / "attempt-0").mkdir(parents=True)
    log = run_dir / "attempt-0" / "console-node-0.log"
    log.write_text("step 1\n")
    out = io.StringIO()
    follower = threading.Thread(target=show_logs, args=(index, "j1"),
                                kwargs={"attempt": 0, "follow": True, "out": out}, daemon=True)
    follower.start()
    follower.join(1.5)
    assert follower.is_alive()  # attempt 0 is still the latest: followed
    with log.open("a") as f:
        f.write("step 2\n")
    (run_dir / "attempt-1").mkdir()
    follower.join(30)  # ends within a poll (0.5 s); 30: a machine many times slower
    assert not follower.is_alive(), "logs --follow --attempt 0 went on after attempt 1 began"
    assert out.getvalue().startswith("step 1\nstep 2\n"), out.getvalue()
