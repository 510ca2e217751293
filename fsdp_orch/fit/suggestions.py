"""What would make a job fit: each single change to its FSDP options or ``fit:`` block that can
lower each GPU's peak, written as the user would write it (a ``--set``), with its estimated peak.

When no single change fits (and the GPUs' memory is known), two changes are tried together: the
pairs of the ``PAIRED`` (3) single changes that lowered the peak most, so 3 pairs at most, each
measured as a single change is; the pairs that fit are listed with the single changes.

``changes``, ``pairs_to_try``, ``paired``, ``ranked`` and ``table`` are pure; ``suggest`` takes the
measuring as a function (the estimate's own, with its cache: each setup is measured once, then read
back). CPU offload needs no measurement: it changes where the shards live, not what one step holds.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from fsdp_orch.fit.budget import Budget, shown
from fsdp_orch.fit.setup import STRATEGIES, FitSetup

PAIRED = 3  # pairs are tried among this many single changes, those with the lowest peaks
T = TypeVar("T")


@dataclass(frozen=True)
class Change:
    says: str  # "CPU offload on"
    sets: tuple[str, ...]  # what --set takes: ("fsdp.offload_params=true",); a pair: two
    setup: FitSetup  # the job's setup with this change
    measures: bool  # False: the job's own measurement, budgeted otherwise (offload)

    @property
    def set(self) -> str:
        return " ".join(self.sets)


@dataclass(frozen=True)
class Suggestion:
    change: str
    set: str  # a pair: both --set values, a space between
    peak_gib: float
    fits: bool | None  # None: no GPU memory to hold it against
    verdict: str
    sets: tuple[str, ...] = ()  # each --set value apart: one, or a pair's two (default: set)

    def __post_init__(self) -> None:
        if not self.sets:
            object.__setattr__(self, "sets", (self.set,))

    @property
    def pair(self) -> bool:
        return len(self.sets) > 1

    def as_json(self) -> dict[str, Any]:
        return {"change": self.change, "set": self.set, "sets": list(self.sets),
                "peak_gib_per_gpu": round(self.peak_gib, 2), "fits": self.fits,
                "verdict": self.verdict}


def wanted(b: Budget, asked: bool) -> bool:
    """Suggestions are worked out when the job does not fit, or when asked: each change measured
    costs what the job's own measurement did (10 s for a 70B model), which a job that fits, even
    tightly, does not pay unasked."""
    return asked or b.fits is False


def changes(setup: FitSetup) -> list[Change]:
    """The single changes that can lower ``setup``'s peak a GPU; each one that could not (offload
    already on, a strategy that already shards most, more nodes where shards stay within a node)
    is left out, so nothing is measured for nothing."""
    found = []
    if not setup.offload_params:
        found.append(Change("CPU offload on", ("fsdp.offload_params=true",),
                            replace(setup, offload_params=True), measures=False))
    if not setup.activation_checkpointing and setup.wrap != "NO_WRAP":
        found.append(Change("activation checkpointing on", ("fsdp.activation_checkpointing=true",),
                            replace(setup, activation_checkpointing=True), measures=True))
    if setup.strategy != "FULL_SHARD" and (setup.strategy, setup.nodes) != ("HYBRID_SHARD", 1):
        found.append(Change(f"FULL_SHARD in place of {setup.strategy}",
                            ("fsdp.sharding_strategy=FULL_SHARD",),
                            replace(setup, strategy="FULL_SHARD"), measures=True))
    fewer = _fewer_tokens(setup)
    if fewer is not None:
        found.append(fewer)
    if STRATEGIES[setup.strategy][0] is False:  # shards over every rank: more ranks, less each
        nodes = setup.nodes * 2
        found.append(Change(f"twice the nodes ({setup.nodes} -> {nodes}, "
                            f"{nodes * setup.procs_per_node} ranks)", (f"nodes={nodes}",),
                            replace(setup, nodes=nodes), measures=True))
    return found


def _fewer_tokens(setup: FitSetup) -> Change | None:
    """Half the tokens a GPU: half the batch, or half the sequence at batch 1."""
    fit = setup.fit
    if fit.batch_size > 1:
        half = fit.batch_size // 2
        return Change(f"half the batch a GPU ({fit.batch_size} -> {half})",
                      (f"fit.batch_size={half}",),
                      replace(setup, fit=fit.model_copy(update={"batch_size": half})),
                      measures=True)
    if fit.seq_len > 1:
        half = fit.seq_len // 2
        return Change(f"half the sequence ({fit.seq_len} -> {half} tokens)",
                      (f"fit.seq_len={half}",),
                      replace(setup, fit=fit.model_copy(update={"seq_len": half})),
                      measures=True)
    return None


def pairs_to_try(tried: Sequence[tuple[T, Suggestion]]) -> list[tuple[T, T]]:
    """The pairs of single changes worth measuring together, given each one's suggestion: none
    where one alone fits or there is no GPU memory to fit; else the pairs of the ``PAIRED`` with
    the lowest peaks (3 at most), each pair and the pairs in the order ``tried`` has them."""
    if not tried or any(s.fits is not False for _, s in tried):
        return []
    lowest = sorted(range(len(tried)), key=lambda i: tried[i][1].peak_gib)[:PAIRED]
    return [(tried[i][0], tried[j][0]) for i, j in itertools.combinations(sorted(lowest), 2)]


def paired(setup: FitSetup, first: Change, second: Change) -> Change:
    """Both changes to ``setup`` at once: what ``second`` changes of it, made on ``first``'s."""
    changed = {f.name: getattr(second.setup, f.name) for f in fields(FitSetup)
               if getattr(second.setup, f.name) != getattr(setup, f.name)}
    return Change(f"{first.says}, and {second.says}", first.sets + second.sets,
                  replace(first.setup, **changed), first.measures or second.measures)


def ranked(suggestions: list[Suggestion]) -> list[Suggestion]:
    """Those that fit first, then the rest; each group by its peak, lowest first."""
    return sorted(suggestions, key=lambda s: (s.fits is not True, s.peak_gib))


def suggest(setup: FitSetup, measured: dict[str, Any], *,
            measure: Callable[[FitSetup], dict[str, Any]],
            budget_of: Callable[[FitSetup, dict[str, Any]], Budget]) -> list[Suggestion]:
    """Each of ``changes(setup)`` with its budget, and the pairs of them that fit where none
    alone does (``pairs_to_try``); ``measured``: the job's own measurement, ``measure``: one for a
    changed setup (asked once a setup: a pair with offload reads its other change's)."""
    known: dict[str, dict[str, Any]] = {json.dumps(setup.key(), sort_keys=True): measured}

    def suggestion(change: Change) -> Suggestion:
        key = json.dumps(change.setup.key(), sort_keys=True)
        if change.measures and key not in known:
            known[key] = measure(change.setup)
        b = budget_of(change.setup, known[key] if change.measures else measured)
        return Suggestion(change.says, change.set, b.peak_gib, b.fits, b.verdict, change.sets)

    singles = [(change, suggestion(change)) for change in changes(setup)]
    pairs = [suggestion(paired(setup, *two)) for two in pairs_to_try(singles)]
    return ranked([s for _, s in singles] + [s for s in pairs if s.fits])


def table(suggestions: list[Suggestion]) -> str:
    """The table's "what would make it fit" section."""
    if not suggestions:
        return "what would make it fit: no single change of offload, activation checkpointing, " \
               "strategy, tokens a GPU or nodes applies\n"
    lines = ["what would make it fit, one change at a time (its estimated peak a GPU):"]
    if any(s.pair for s in suggestions):
        lines = [f"what would make it fit (its estimated peak a GPU): no single change, but two "
                 f"together (of the {PAIRED} that lower it most):"]
    said = [" --set ".join(s.sets) for s in suggestions]
    width = max(36, *(len(text) + 2 for text in said))
    for s, text in zip(suggestions, said, strict=True):
        verdict = f"{s.verdict}; " if s.fits is not None else ""  # none: said once, above
        lines.append(f"  --set {text:<{width}}{shown(s.peak_gib)}  {verdict}{s.change}")
    if len(suggestions) > 1 and not any(s.fits is not False for s in suggestions):
        lines.append(f"  (no single change fits, nor any two of the {PAIRED} that lower the peak "
                     "most together)")
    if any(s.set.startswith("fit.") for s in suggestions):
        lines.append("  (fit.batch_size and fit.seq_len say what the script runs: change its "
                     "arguments with them)")
    return "\n".join(lines) + "\n"


__all__ = ["PAIRED", "Change", "Suggestion", "changes", "paired", "pairs_to_try", "ranked",
           "suggest", "table", "wanted"]
