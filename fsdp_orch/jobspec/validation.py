"""Turn pydantic validation errors into one InputError naming file,
line, field path and expectation."""

from __future__ import annotations

import difflib
import re
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails

from fsdp_orch.jobspec.yamlio import YamlDoc, dotted
from fsdp_orch.vocab.errors import InputError


@dataclass(frozen=True)
class FieldOrigin:
    """Where a field's value was written when not in the document
    itself (``--set``, another file)."""

    file: str
    line: int | None = None
    # its name there, when it differs (``fsdp_config.fsdp_sharding_strategy``)
    field: str | None = None


def reattribute(exc: InputError, origins: dict[tuple[str, ...], FieldOrigin]) -> InputError:
    """Point ``exc`` at the file and line where its field really came from, if that is elsewhere."""
    if not exc.field or not origins:
        return exc
    parts = tuple(exc.field.split("."))
    for n in range(len(parts), 0, -1):
        origin = origins.get(parts[:n])
        if origin is not None:
            field = exc.field if origin.field is None else origin.field + "".join(
                "." + p for p in parts[n:])
            return InputError(exc.detail, file=origin.file, field=field, line=origin.line)
    # an error of a whole mapping (an unknown key, the env's fault) that only one origin wrote
    # into: ``--set foo.bar=1`` blamed the job file for ``foo``
    below = [(key, origin) for key, origin in origins.items() if key[:len(parts)] == parts]
    if len(below) == 1:
        key, origin = below[0]
        return InputError(exc.detail, file=origin.file, line=origin.line,
                          field=origin.field or ".".join(key))
    return exc


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo in ``max_restarts`` must not silently mean zero restarts.
    Neither is a number what it is not: ``true`` for a count (pydantic would take it as 1), or an
    infinite or NaN float."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True,
                              allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            annotation = _plain(cls.model_fields[info.field_name].annotation)
            if annotation in _NUMBERS:
                raise ValueError(f"expected a number, got {str(value).lower()}")
        return value


_NUMBERS = (int, float, int | None, float | None)


def _plain(annotation: Any) -> Any:
    """``annotation`` without its ``Annotated`` bounds (``Annotated[int, at_most(9)] | None`` is
    ``int | None``), to tell a number field."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return args[0]
    if args and any(typing.get_origin(a) is typing.Annotated for a in args):
        parts = tuple(_plain(a) for a in args)
        return parts[0] | parts[1] if len(parts) == 2 else annotation
    return annotation


def validate_doc(model: type[BaseModel], doc: YamlDoc, data: dict[str, Any] | None = None) -> Any:
    try:
        return model.model_validate(doc.data if data is None else data)
    except ValidationError as exc:
        raise to_input_error(exc, model, doc, doc.data if data is None else data) from None
    except RecursionError:  # pragma: no cover - yamlio bounds depth; this guards other callers
        raise InputError("nested too deeply", file=doc.file) from None


def to_input_error(exc: ValidationError, model: type[BaseModel], doc: YamlDoc,
                   data: Any = None) -> InputError:
    errors = exc.errors(include_url=False)
    messages = [_describe(err, model, data) for err in errors]
    first = errors[0]
    loc = _clean_loc(first["loc"], data)
    extra = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''}: " + \
        "; ".join(f"{p}: {m}" for p, m in messages[1:4]) + ")" if len(errors) > 1 else ""
    field_path, detail = messages[0]
    return InputError(detail + extra, file=doc.file, field=field_path or None,
                      line=doc.line_of(loc))


# What pydantic adds to locations besides field names: validator and type tags such as
# "function-after[_ordered(), Backoff]" or "literal['a','b']", and "[key]" for a dict key.
_PYDANTIC_TAG = re.compile(r"(?:[a-z][a-z0-9_-]*)?\[.*\]", re.S)


# a union's member named in a location (sbatch_extra.exclude.str): the user wrote no such key
_UNION_TAGS = frozenset({"str", "int", "float", "bool", "none", "dict", "list"})


def _clean_loc(loc: tuple[Any, ...], data: Any = None) -> tuple[str | int, ...]:
    """The field path of ``loc``: a part the user wrote is kept even when it looks like a tag."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif isinstance(part, str) and (_PYDANTIC_TAG.fullmatch(part) or part in _UNION_TAGS):
            continue
        else:
            node = None
        out.append(part)
    return tuple(out)


def _describe(err: ErrorDetails, model: type[BaseModel], data: Any = None) -> tuple[str, str]:
    loc = _clean_loc(err["loc"], data)
    path = dotted(loc)
    kind = err["type"]
    given = err.get("input")
    if kind == "extra_forbidden" and loc:
        known = _fields_at(model, loc[:-1])
        hint = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        msg = "unknown field" + (f"; did you mean {hint[0]!r}?" if hint else
                                 f"; expected one of: {', '.join(sorted(known))}")
        return path, msg
    if kind == "missing":
        return path, "missing required field"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    elif msg.startswith("Input should be"):
        msg = "expected" + msg[len("Input should be"):]
    # a whole mapping is not repeated: it says nothing the message does not, and an env: holds
    # values (a plain token) that an error line must not print
    if "got" not in msg and kind not in ("missing",) and not isinstance(given, dict):
        msg += f"; got {_short(given)}"
    return path, msg


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fields_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """Field names (and aliases) of the model reached by following ``loc`` from ``model``,
    through lists (``hosts.0``) and mappings of models as well as nested models."""
    current: Any = model
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    found = _models_in(current)
    if len(found) != 1:
        return []
    names = list(found[0].model_fields)
    return names + list(getattr(found[0], "accepted_aliases", ()))


def _step(tp: Any, part: str | int) -> Any:
    """The type found at ``part`` inside a value of type ``tp`` (None if there is none)."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        info = tp.model_fields.get(str(part))
        return info.annotation if info else None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (list, tuple, set, frozenset) and isinstance(part, int) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    if origin is typing.Annotated:
        return _step(args[0], part)
    for arg in args:  # a union: the first member that has ``part``
        inner = _step(arg, part)
        if inner is not None:
            return inner
    return None


def _models_in(tp: Any) -> list[type[BaseModel]]:
    """The models a (possibly optional or annotated) type stands for."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    if typing.get_origin(tp) in (list, tuple, set, frozenset, dict):
        return []
    return [m for arg in typing.get_args(tp) for m in _models_in(arg)]


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an environment variable's name
    (the launch scripts ``export`` them)."""
    if not _ENV_NAME.fullmatch(name):
        return f"environment variable name {name!r} is not a valid shell name"
    return None


def check_env_names(env: dict[str, Any]) -> dict[str, Any]:
    """Every key must be a shell variable name."""
    for key in env:
        problem = env_name_problem(key)
        if problem:
            raise ValueError(problem)
    return env
