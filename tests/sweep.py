"""The cases a test sweeps over: in the suite, the few that its assertions need; under
``bench/sweeps.py`` (``FSDP_ORCH_SWEEP=full``), every one. A sweep's other cases run the same code
on other inputs, and the suite's time is spent on a loaded 2-core CI machine where one real estimate
or job costs 2-5x what it costs alone (docs/results.md, "The suite's time")."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TypeVar

Case = TypeVar("Case")

FULL = os.environ.get("FSDP_ORCH_SWEEP") == "full"


def cases(every: Iterable[Case], in_suite: Iterable[Case]) -> tuple[Case, ...]:
    """``every`` case under the full sweep, else those of ``in_suite`` (in ``every``'s order)."""
    every, in_suite = tuple(every), tuple(in_suite)
    unknown = [case for case in in_suite if case not in every]
    assert not unknown, f"cases kept in the suite that the sweep lacks: {unknown}"
    return every if FULL else tuple(case for case in every if case in in_suite)
