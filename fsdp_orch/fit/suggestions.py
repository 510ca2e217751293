"""What would make a job fit: each single change to its FSDP options or ``fit:`` block that can
lower each GPU's peak, written as the user would write it (a ``--set``), with its estimated peak.

``changes``, ``ranked`` and ``table`` are pure; ``suggest`` takes the measuring as a function (the
estimate's own, with its cache: each change is measured once, then read back). CPU offload needs
no measurement: it changes where the shards live, not what one step holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from fsdp_orch.fit.budget import Budget, shown
from fsdp_orch.fit.setup import STRATEGIES, FitSetup


@dataclass(frozen=True)
class Change:
    says: str  # "CPU offload on"
    set: str  # what --set takes: "fsdp.offload_params=true"
    setup: FitSetup  # the job's setup with this change
    measures: bool  # False: the job's own measurement, budgeted otherwise (offload)


@dataclass(frozen=True)
class Suggestion:
    change: str
    set: str
    peak_gib: float
    fits: bool | None  # None: no GPU memory to hold it against
    verdict: str

    def as_json(self) -> dict[str, Any]:
        return {"change": self.change, "set": self.set,
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
        found.append(Change("CPU offload on", "fsdp.offload_params=true",
                            replace(setup, offload_params=True), measures=False))
    if not setup.activation_checkpointing and setup.wrap != "NO_WRAP":
        found.append(Change("activation checkpointing on", "fsdp.activation_checkpointing=true",
                            replace(setup, activation_checkpointing=True), measures=True))
    if setup.strategy != "FULL_SHARD" and (setup.strategy, setup.nodes) != ("HYBRID_SHARD", 1):
        found.append(Change(f"FULL_SHARD in place of {setup.strategy}",
                            "fsdp.sharding_strategy=FULL_SHARD",
                            replace(setup, strategy="FULL_SHARD"), measures=True))
    fewer = _fewer_tokens(setup)
    if fewer is not None:
        found.append(fewer)
    if STRATEGIES[setup.strategy][0] is False:  # shards over every rank: more ranks, less each
        nodes = setup.nodes * 2
        found.append(Change(f"twice the nodes ({setup.nodes} -> {nodes}, "
                            f"{nodes * setup.procs_per_node} ranks)", f"nodes={nodes}",
                            replace(setup, nodes=nodes), measures=True))
    return found


def _fewer_tokens(setup: FitSetup) -> Change | None:
    """Half the tokens a GPU: half the batch, or half the sequence at batch 1."""
    fit = setup.fit
    if fit.batch_size > 1:
        half = fit.batch_size // 2
        return Change(f"half the batch a GPU ({fit.batch_size} -> {half})",
                      f"fit.batch_size={half}",
                      replace(setup, fit=fit.model_copy(update={"batch_size": half})),
                      measures=True)
    if fit.seq_len > 1:
        half = fit.seq_len // 2
        return Change(f"half the sequence ({fit.seq_len} -> {half} tokens)", f"fit.seq_len={half}",
                      replace(setup, fit=fit.model_copy(update={"seq_len": half})),
                      measures=True)
    return None


def ranked(suggestions: list[Suggestion]) -> list[Suggestion]:
    """Those that fit first, then the rest; each group by its peak, lowest first."""
    return sorted(suggestions, key=lambda s: (s.fits is not True, s.peak_gib))


def suggest(setup: FitSetup, measured: dict[str, Any], *,
            measure: Callable[[FitSetup], dict[str, Any]],
            budget_of: Callable[[FitSetup, dict[str, Any]], Budget]) -> list[Suggestion]:
    """Each of ``changes(setup)`` with its budget; ``measured``: the job's own measurement,
    ``measure``: one for a changed setup."""
    found = []
    for change in changes(setup):
        b = budget_of(change.setup, measure(change.setup) if change.measures else measured)
        found.append(Suggestion(change.says, change.set, b.peak_gib, b.fits, b.verdict))
    return ranked(found)


def table(suggestions: list[Suggestion]) -> str:
    """The table's "what would make it fit" section."""
    if not suggestions:
        return "what would make it fit: no single change of offload, activation checkpointing, " \
               "strategy, tokens a GPU or nodes applies\n"
    lines = ["what would make it fit, one change at a time (its estimated peak a GPU):"]
    for s in suggestions:
        verdict = f"{s.verdict}; " if s.fits is not None else ""  # none: said once, above
        lines.append(f"  --set {s.set:<36}{shown(s.peak_gib)}  {verdict}{s.change}")
    if any(s.set.startswith("fit.") for s in suggestions):
        lines.append("  (fit.batch_size and fit.seq_len say what the script runs: change its "
                     "arguments with them)")
    return "\n".join(lines) + "\n"


__all__ = ["Change", "Suggestion", "changes", "ranked", "suggest", "table", "wanted"]
