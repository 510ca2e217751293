"""The job spec's field types: durations ("30s" or 30), counts, strings that reach a program,
paths, module names and the elastic node range ``MIN-MAX``, each with its validation."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from fsdp_orch.jobspec.durations import parse_duration
from fsdp_orch.jobspec.limits import (
    MAX_COUNT,
    MAX_NODES,
    MIN_POLL_S,
    MIN_TIMEOUT_S,
    at_least_seconds,
    at_most,
)
from fsdp_orch.vocab.inputs import control_character

_NODE_RANGE = re.compile(r"\s*([0-9]+)\s*-\s*([0-9]+)\s*")

# json_schema_input_type: what `fsdp-orch schema` tells editors a file may hold ("30s" or 30)
Duration = Annotated[float, BeforeValidator(parse_duration, json_schema_input_type=float | str)]
PositiveDuration = Annotated[float, BeforeValidator(parse_duration,
                                                    json_schema_input_type=float | str),
                             Field(gt=0)]
# A watch timeout (>= 1 s) and a poll or the adaptive window's floor (>= 0.1 s): shorter is
# meaningless, the supervisor looking no more often than that.
Timeout = Annotated[float, BeforeValidator(parse_duration, json_schema_input_type=float | str),
                    at_least_seconds(MIN_TIMEOUT_S)]
PollDuration = Annotated[float, BeforeValidator(parse_duration, json_schema_input_type=float | str),
                         at_least_seconds(MIN_POLL_S)]
Count = Annotated[int, at_most(MAX_COUNT)]


def upper_enum(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip().upper()
    return value


def _scalar_to_str(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL bytes (a program cannot receive them)")
    return value


# A string that reaches a program (argv, environment, paths): numbers and booleans written
# unquoted become their text; NUL bytes, which no argv or environment can carry, are refused.
ArgStr = Annotated[str, BeforeValidator(_scalar_to_str,
                                        json_schema_input_type=str | int | float | bool),
                   AfterValidator(_no_nul)]
ShellStr = Annotated[str, AfterValidator(_no_nul)]


def a_path(value: str) -> str:
    """A folder or file path: not empty, no control characters (a line break splits the launch
    script's line)."""
    if not value.strip():
        raise ValueError("expected a folder or file path; got an empty one")
    problem = control_character(value)
    if problem is not None:
        raise ValueError(f"expected a path without control characters; it holds {problem}")
    return value


def a_script(value: str) -> str:
    if not value.strip():
        raise ValueError("expected a script path (train.py); got an empty one")
    a_path(value)
    return value


def a_module(value: str) -> str:
    """What ``python -m`` takes: a dotted module name (pkg.train), not a path or a flag."""
    if not all(part.isidentifier() for part in value.split(".")):
        raise ValueError(f"expected a module name like pkg.train (what python -m takes); "
                         f"got {value!r}")
    return value


def node_range(value: Any) -> tuple[int, int] | None:
    """``nodes:`` written as an elastic range ``"MIN-MAX"``: (MIN, MAX); None for anything else
    (a count is validated as an int). ValueError for a range that makes no sense."""
    if not isinstance(value, str):
        return None
    match = _NODE_RANGE.fullmatch(value)
    if match is None:
        if value.strip().isdigit() and value.strip().isascii():
            return None
        raise ValueError("expected a node count (2) or an elastic range MIN-MAX (1-2: "
                         "up to MAX nodes, going on with MIN or more after losing some)")
    low, high = int(match.group(1)), int(match.group(2))
    if high > MAX_NODES:
        raise ValueError(f"expected at most {MAX_NODES} nodes; got {value.strip()[:30]!r}")
    if low < 1 or low > high:
        raise ValueError("expected a range MIN-MAX with 1 <= MIN <= MAX (1-2)")
    return low, high


def max_of_range(value: Any) -> Any:
    if isinstance(value, (list, dict)) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError("expected a node count (2) or an elastic range MIN-MAX (1-2), a whole "
                         f"number; got {value!r}")
    found = node_range(value)
    return value if found is None else found[1]
