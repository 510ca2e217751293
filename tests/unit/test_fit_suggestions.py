"""What would make a job fit (pure, given measured peaks): which single changes apply to a job,
that each change's ``--set`` makes the very setup its peak was worked out for, and how they are
ranked; offload is budgeted from the job's own measurement, never measured again."""

from __future__ import annotations

import itertools

import pytest

from fsdp_orch.fit.budget import GIB
from fsdp_orch.fit.estimate import budget_of
from fsdp_orch.fit.setup import FitSetup, fit_setup
from fsdp_orch.fit.suggestions import (
    Suggestion,
    changes,
    paired,
    pairs_to_try,
    ranked,
    suggest,
    table,
)
from fsdp_orch.jobspec.loading import apply_override
from fsdp_orch.jobspec.schema import JobSpec


def job_doc(**fsdp: object) -> dict:
    return {"name": "j", "script": "t.py", "nodes": fsdp.pop("nodes", 1), "procs_per_node": 2,
            "fsdp": {"sharding_strategy": "FULL_SHARD", "activation_checkpointing": True,
                     **fsdp},
            "fit": {"model": "config.json", "batch_size": 2, "seq_len": 2048}}


def setup_of(doc: dict) -> FitSetup:
    return fit_setup(JobSpec.model_validate(doc), 8, "job.yaml")


@pytest.mark.parametrize("fsdp,expected", [
    ({}, ["fsdp.offload_params=true", "fit.batch_size=1", "nodes=2"]),
    ({"offload_params": True, "activation_checkpointing": False,
      "sharding_strategy": "SHARD_GRAD_OP"},
     ["fsdp.activation_checkpointing=true", "fsdp.sharding_strategy=FULL_SHARD",
      "fit.batch_size=1", "nodes=2"]),
    # shards within a node: more nodes leave each GPU's share as it is
    ({"sharding_strategy": "HYBRID_SHARD", "nodes": 2},
     ["fsdp.offload_params=true", "fsdp.sharding_strategy=FULL_SHARD", "fit.batch_size=1"]),
    ({"sharding_strategy": "NO_SHARD"},
     ["fsdp.offload_params=true", "fsdp.sharding_strategy=FULL_SHARD", "fit.batch_size=1"]),
    # no layer wrapped: checkpointing would wrap nothing
    ({"activation_checkpointing": False, "auto_wrap_policy": "NO_WRAP"},
     ["fsdp.offload_params=true", "fit.batch_size=1", "nodes=2"]),
])
def test_only_the_changes_that_can_lower_the_peak_are_tried(fsdp, expected) -> None:
    assert [c.set for c in changes(setup_of(job_doc(**fsdp)))] == expected


def test_at_batch_one_the_sequence_is_halved() -> None:
    doc = job_doc()
    doc["fit"]["batch_size"] = 1
    [fewer] = [c for c in changes(setup_of(doc)) if c.set.startswith("fit.")]
    assert fewer.set == "fit.seq_len=1024" and fewer.setup.fit.seq_len == 1024


@pytest.mark.parametrize("fsdp", [{}, {"activation_checkpointing": False,
                                       "sharding_strategy": "HYBRID_SHARD_ZERO2", "nodes": 2}])
def test_each_changes_set_as_the_user_writes_it_makes_the_setup_it_was_worked_out_for(
        fsdp) -> None:
    doc = job_doc(**fsdp)
    for change in changes(setup_of(doc)):
        assert setup_of(apply_override(doc, change.set)) == change.setup, change.set


def test_the_ones_that_fit_come_first_each_group_lowest_peak_first() -> None:
    def s(peak: float, fits: bool | None) -> Suggestion:
        return Suggestion(f"c{peak}", f"x={peak}", peak, fits, "")

    given = [s(30, False), s(12, True), s(26, False), s(21, True)]
    assert [x.peak_gib for x in ranked(given)] == [12, 21, 26, 30]
    assert [x.peak_gib for x in ranked([s(9, None), s(3, None)])] == [3, 9]


def peak(gib_of_params: float, gib_of_acts: float) -> dict:
    return {"peak": {"sharded_param": int(gib_of_params * GIB), "opt": int(GIB),
                     "act": int(gib_of_acts * GIB)}, "weights": 0}


def suggested(setup: FitSetup, by_set: dict[str, dict], gpu_gib: int,
              ) -> tuple[list[Suggestion], list[FitSetup]]:
    """``suggest`` with made-up measurements by the changes' ``set`` (a pair's: both), and the
    setups it asked to measure."""
    singles = changes(setup)
    every = singles + [paired(setup, *two) for two in itertools.combinations(singles, 2)]
    by_setup = {c.setup: by_set[c.set] for c in every if c.set in by_set}
    asked = []

    def measure(changed: FitSetup) -> dict:
        asked.append(changed)
        return by_setup[changed]

    found = suggest(setup, peak(18, 6), measure=measure,
                    budget_of=lambda s, m: budget_of(s, m, gpu_gib << 30))
    return found, asked


def test_offload_is_budgeted_from_the_jobs_own_measurement_the_rest_measured_once_each() -> None:
    setup = setup_of(job_doc())  # offload off, checkpointing on, batch 2, 1 node
    found, asked = suggested(setup, {"fit.batch_size=1": peak(18, 3), "nodes=2": peak(9, 6)}, 24)
    assert len(asked) == 2 and setup not in asked
    assert [(x.set, x.fits) for x in found] == [
        ("fsdp.offload_params=true", True), ("nodes=2", True), ("fit.batch_size=1", False)]
    offload, nodes, batch = found
    # offload takes the shards and the optimizer state off the GPU; the activations stay
    assert offload.peak_gib < nodes.peak_gib < batch.peak_gib
    assert offload.as_json() == {"change": "CPU offload on", "set": "fsdp.offload_params=true",
                                 "sets": ["fsdp.offload_params=true"],
                                 "peak_gib_per_gpu": round(offload.peak_gib, 2), "fits": True,
                                 "verdict": offload.verdict}
    shown = table(found)
    assert shown.splitlines()[1].split()[:2] == ["--set", "fsdp.offload_params=true"]
    assert "change its arguments" in shown  # fit.batch_size describes the script's batch


def made_up(peak: float, fits: bool | None) -> Suggestion:
    return Suggestion(f"c{peak}", f"x={peak}", peak, fits, "")


@pytest.mark.parametrize("peaks,fits,expected", [
    # the three lowest peaks (b, c, d), each pair in the order the changes were listed
    ([30, 20, 25, 22], False, [("b20", "c25"), ("b20", "d22"), ("c25", "d22")]),
    ([30, 20], False, [("a30", "b20")]),
    ([30], False, []),
    ([30, 20, 25], None, []),  # no GPU memory: nothing fits or does not
])
def test_pairs_are_tried_among_the_three_lowest_peaks_only_when_no_single_change_fits(
        peaks, fits, expected) -> None:
    tried = [(f"{name}{p}", made_up(p, fits)) for name, p in zip("abcd", peaks, strict=False)]
    assert pairs_to_try(tried) == expected
    one_fits = [*tried[:-1], (tried[-1][0], made_up(peaks[-1], True))]
    assert pairs_to_try(one_fits) == []


def test_a_pairs_two_sets_as_the_user_writes_them_make_the_setup_it_was_worked_out_for() -> None:
    doc = job_doc(activation_checkpointing=False, sharding_strategy="SHARD_GRAD_OP")
    setup = setup_of(doc)
    singles = changes(setup)
    for first, second in itertools.combinations(singles, 2):
        both = paired(setup, first, second)
        assert both.sets == first.sets + second.sets
        assert setup_of(apply_override(apply_override(doc, first.set), second.set)) == both.setup
        assert both.measures == (first.measures or second.measures)


def test_where_no_single_change_fits_the_pairs_that_fit_are_listed_first() -> None:
    setup = setup_of(job_doc())  # offload off, checkpointing on, batch 2, 1 node
    # 7 GiB GPUs: alone, offload 7.35 GiB (the activations and the stated models), 2 nodes 18.35,
    # batch 1 24.95; together, offload and batch 1 4.05 (fits), offload and 2 nodes 7.35, batch 1
    # and 2 nodes 13.95 (neither listed)
    found, asked = suggested(setup, {"fit.batch_size=1": peak(18, 3), "nodes=2": peak(9, 6),
                                     "fit.batch_size=1 nodes=2": peak(9, 3)}, 7)
    assert len(asked) == 3, "a pair with offload reads its other change's measurement"
    fitting = [x for x in found if x.fits]
    assert [x.sets for x in fitting] == [("fsdp.offload_params=true", "fit.batch_size=1")]
    assert [x.fits for x in found] == [True, False, False, False]
    assert all(not x.pair for x in found[1:])
    assert found[0].as_json()["sets"] == ["fsdp.offload_params=true", "fit.batch_size=1"]
    assert found[0].as_json()["set"] == "fsdp.offload_params=true fit.batch_size=1"
    shown = table(found)
    assert "no single change, but two together" in shown.splitlines()[0]
    assert shown.splitlines()[1].split()[:4] == ["--set", "fsdp.offload_params=true", "--set",
                                                 "fit.batch_size=1"]
