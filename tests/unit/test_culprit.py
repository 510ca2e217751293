"""Which hung rank leads the evidence: the one outside a collective, then the one behind in its
collective count, then the first to stop. Real py-spy dumps from tests/fixtures/stacks/."""

from __future__ import annotations

from pathlib import Path

from fsdp_orch.decide.watchdog import HangVerdict
from fsdp_orch.observe.stack_parse import Frame, ThreadStack, parse_pyspy_dump
from fsdp_orch.observe.stacks import StackCapture, StackDump
from fsdp_orch.supervise.culprit import (
    IN_BACKWARD,
    IN_COLLECTIVE,
    NOT_IN_COLLECTIVE,
    culprit_order,
    headline,
    place_of,
)
from fsdp_orch.supervise.hang_evidence import explain_hang

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stacks"
SITE = "/work/main/.venv/lib/python3.11/site-packages"
ROOTS = ("/root/.pyenv/versions/3.11.7/lib/python3.11", SITE, "/work/main/fsdp_orch")


def pyspy(name: str) -> list[ThreadStack]:
    return parse_pyspy_dump((FIXTURES / name).read_text())


def main_only(*frames: tuple[str, str, int | None]) -> list[ThreadStack]:
    """A main thread of (function, file, line), innermost first."""
    return [ThreadStack(1, "MainThread", False, tuple(Frame(f, p, n) for f, p, n in frames))]


def test_the_demo_rank_in_an_fsdp_all_gather_waits_and_the_rank_in_the_fault_is_stuck():
    waiting = place_of(0, pyspy("pyspy-fsdp2-demo-rank0.txt"), ROOTS)
    stuck = place_of(1, pyspy("pyspy-fsdp2-demo-rank1.txt"), ROOTS)
    assert (waiting.tier, waiting.collective) == (IN_COLLECTIVE, "all_gather_single")
    assert waiting.where == "train.py:120 main"
    assert (stuck.tier, stuck.collective) == (NOT_IN_COLLECTIVE, None)
    assert stuck.where == "train.py:130 main"


def test_the_culprit_leads_whatever_the_timing_says():
    places = {0: place_of(0, pyspy("pyspy-torchrun-rank0.txt"), ROOTS),
              1: place_of(1, pyspy("pyspy-torchrun-rank1.txt"), ROOTS)}
    # rank 0 "stopped first" by 26 microseconds: the timing alone would name it
    assert culprit_order(places, [0, 1]) == [1, 0]
    assert headline([1, 0], places) == (
        "rank 1 stuck in hang_ddp.py:27 main (not in a collective); "
        "1 rank waiting in all_reduce: rank 0 at hang_ddp.py:11 sync_grads")


def test_when_every_rank_waits_in_a_collective_the_lowest_collective_count_leads():
    in_all_reduce = pyspy("pyspy-torchrun-rank0.txt")
    places = {r: place_of(r, in_all_reduce, ROOTS) for r in (0, 1, 2)}
    assert culprit_order(places, [0, 1, 2]) == [0, 1, 2]  # no counts: timing
    assert culprit_order(places, [0, 1, 2], {0: 42, 1: 41, 2: 42}) == [1, 0, 2]
    line = headline([1, 0, 2], places, {0: 42, 1: 41, 2: 42})
    assert line.startswith("every stuck rank waits in a collective; rank 1 leads "
                           "(collective count 41, the lowest): in all_reduce at "
                           "hang_ddp.py:11 sync_grads")
    assert line.endswith("; 2 ranks waiting in all_reduce: rank 0 at hang_ddp.py:11 sync_grads, "
                         "rank 2 at hang_ddp.py:11 sync_grads")


def test_wrappers_of_accelerate_lightning_and_the_trainer_count_as_collectives():
    trainer_gather = main_only(
        ("_nested_gather", f"{SITE}/transformers/trainer.py", 5000),
        ("gather", f"{SITE}/accelerate/utils/operations.py", 380),
        ("_inner_training_loop", f"{SITE}/transformers/trainer.py", 2600),
        ("main", "/job/train.py", 80))
    lightning_barrier = main_only(
        ("DDPStrategy.barrier", f"{SITE}/lightning/pytorch/strategies/ddp.py", 301),
        ("main", "/job/train.py", 40))
    assert place_of(0, trainer_gather, ROOTS).collective == "gather"
    assert place_of(0, lightning_barrier, ROOTS).collective == "barrier"


def test_a_rank_inside_backward_without_a_collective_frame_ranks_between():
    backward = main_only(("_engine_run_backward", f"{SITE}/torch/autograd/graph.py", 829),
                         ("backward", f"{SITE}/torch/autograd/__init__.py", 354),
                         ("backward", f"{SITE}/torch/_tensor.py", 648),
                         ("main", "/job/train.py", 55))
    sleeping = main_only(("main", "/job/train.py", 60))
    in_collective = pyspy("pyspy-torchrun-rank0.txt")
    places = {0: place_of(0, in_collective, ROOTS), 1: place_of(1, backward, ROOTS),
              2: place_of(2, sleeping, ROOTS)}
    assert places[1].tier == IN_BACKWARD
    assert culprit_order(places, [0, 1, 2]) == [2, 1, 0]


def test_a_rank_stuck_writing_a_checkpoint_leads_and_is_said_to_be_saving():
    writing = main_only(("write_data", f"{SITE}/torch/distributed/checkpoint/filesystem.py", 400),
                        ("save", f"{SITE}/torch/distributed/checkpoint/state_dict_saver.py", 150),
                        ("main", "/job/train.py", 90))
    gathering = main_only(("gather_object", f"{SITE}/torch/distributed/distributed_c10d.py", 3000),
                          ("_DistWrapper.gather_object",
                           f"{SITE}/torch/distributed/checkpoint/utils.py", 120),
                          ("save", f"{SITE}/torch/distributed/checkpoint/state_dict_saver.py", 150),
                          ("main", "/job/train.py", 90))
    places = {0: place_of(0, gathering, ROOTS), 1: place_of(1, writing, ROOTS)}
    assert culprit_order(places, [0, 1]) == [1, 0]
    assert headline([1, 0], places) == (
        "rank 1 stuck in train.py:90 main (not in a collective; in a "
        "checkpoint save); 1 rank waiting in gather_object: rank 0 at "
        "train.py:90 main")


def test_the_evidence_leads_with_the_culprit_then_the_timing_then_the_frames():
    verdict = HangVerdict(10.4, [0, 1],
                          "no progress for 10.4s (window 10s): rank 0 last reported step 30",
                          suspects=[0, 1])
    dumps = {0: StackDump(0, 10, tuple(pyspy("pyspy-fsdp2-demo-rank0.txt"))),
             1: StackDump(1, 11, tuple(pyspy("pyspy-fsdp2-demo-rank1.txt")))}
    explained = explain_hang(verdict, StackCapture(dumps, "/run/stacks"), library_roots=ROOTS)
    assert explained.order == [1, 0]
    assert explained.evidence.startswith(
        "rank 1 stuck in train.py:130 main (not in a collective); 1 rank waiting in "
        "all_gather_single: rank 0 at train.py:120 main; no progress for 10.4s")
    assert explained.evidence.endswith("; stacks: /run/stacks")
    assert explained.stacks == "/run/stacks"
    no_stacks = explain_hang(verdict,
                             StackCapture({}, None, "no rank runs on the supervisor's host"))
    assert (no_stacks.evidence.endswith("; no rank runs on the supervisor's host")
            and no_stacks.stacks is None)


def test_real_gloo_flight_recorder_dumps_order_ranks_that_all_wait_in_collectives():
    """Dumps torch 2.13 wrote on this machine (tests/fixtures/collective_counts/gloo-behind): rank 1
    skipped an all_reduce; both ranks' stacks say "in a collective", the counts say who is
    behind."""
    from fsdp_orch.observe.collective_counts import counts_from_dumps, parse_dumps

    folder = FIXTURES.parent / "collective_counts" / "gloo-behind"
    counts = counts_from_dumps(parse_dumps({p.name: p.read_bytes()
                                            for p in folder.glob("nccl_trace_rank_*")}))
    assert counts[1] < counts[0]
    in_all_reduce = pyspy("pyspy-torchrun-rank0.txt")
    places = {r: place_of(r, in_all_reduce, ROOTS) for r in (0, 1)}
    assert culprit_order(places, [0, 1], counts) == [1, 0]
    assert headline([1, 0], places, counts).startswith(
        "every stuck rank waits in a collective; rank 1 leads (collective count "
        f"{counts[1]}, the lowest)")


def test_nccl_ras_counts_come_from_its_client_where_it_is_installed():
    """NCCL's RAS client cannot run here (no GPU, no NCCL): its documented output stands in for it,
    handed back by the injected runner."""
    from fsdp_orch.observe.command import CommandResult
    from fsdp_orch.supervise.hang_evidence import ras_counts

    text = (FIXTURES.parent / "collective_counts" / "ras-doc-mismatch-counts.txt").read_text()
    asked = []

    def run(argv, timeout):  # type: ignore[no-untyped-def]
        asked.append(argv)
        return CommandResult(0, text, "")

    counts = ras_counts(run, which=lambda name: f"/usr/bin/{name}")
    assert asked == [["/usr/bin/ncclras", "-v"]]
    assert counts[0] == 6649 and max(counts.values()) == 6650  # rank 0 is among the 6 behind
    assert ras_counts(run, which=lambda name: None) == {}
    assert ras_counts(lambda argv, timeout: CommandResult(1, "", "connection refused"),
                      which=lambda name: "/usr/bin/ncclras") == {}


def test_on_xla_a_host_in_the_steps_graph_waits_and_a_host_in_its_own_code_is_stuck():
    # Collectives run inside XLA's compiled graph: a host waiting for its peers sits where the
    # graph runs, torch_xla.sync() (the stack the first XLA test run here showed while it compiled)
    xla = "/work/main/.venv-xla/lib/python3.11/site-packages"
    roots = (*ROOTS, xla)
    waiting = place_of(0, main_only(("sync", f"{xla}/torch_xla/torch_xla.py", 87),
                                    ("main", "/job/train.py", 142)), roots)
    stuck = place_of(1, main_only(("load_batch", "/job/train.py", 60),
                                  ("main", "/job/train.py", 130)), roots)
    assert (waiting.tier, waiting.collective) == (IN_COLLECTIVE, "sync")
    assert stuck.tier == NOT_IN_COLLECTIVE
    assert culprit_order({0: waiting, 1: stuck}, [0, 1]) == [1, 0]
    mark_step = place_of(0, main_only(("mark_step", f"{xla}/torch_xla/core/xla_model.py", 1060),
                                      ("main", "/job/train.py", 99)), roots)
    assert (mark_step.tier, mark_step.collective) == (IN_COLLECTIVE, "mark_step")


def test_on_nccl_the_rank_in_user_code_leads_the_rank_waiting_for_the_gpu():
    """On NCCL a collective returns at once and its rank blocks at the next CUDA synchronisation:
    the healthy rank waiting for a hung peer is there, not in a collective frame (the frame as an
    H200 showed it: tests/fixtures/stacks/pyspy-h200-cuda-synchronize.txt)."""
    syncing = main_only(("synchronize", f"{SITE}/torch/cuda/__init__.py", 1162),
                        ("main", "/job/train.py", 70))
    event_wait = main_only(("Event.synchronize", f"{SITE}/torch/cuda/streams.py", 230),
                           ("main", "/job/train.py", 71))
    stuck = main_only(("main", "/job/train.py", 63))
    places = {0: place_of(0, syncing, ROOTS), 1: place_of(1, stuck, ROOTS),
              2: place_of(2, event_wait, ROOTS)}
    assert places[0].tier == places[2].tier == IN_BACKWARD and places[0].on_device
    assert places[1].tier == NOT_IN_COLLECTIVE
    assert culprit_order(places, [0, 2, 1]) == [1, 0, 2]
    assert headline([1, 0, 2], places) == (
        "rank 1 stuck in train.py:63 main (not in a collective); 2 ranks waiting in a CUDA "
        "synchronisation: rank 0 at train.py:70 main, rank 2 at train.py:71 main")
    # what the flight recorder says wins over the stack: rank 0 has an all_reduce queued
    queued = place_of(0, syncing, ROOTS, pending="nccl:all_reduce")
    assert (queued.tier, queued.collective) == (
        IN_COLLECTIVE, "all_reduce (queued, per its flight recorder)")
