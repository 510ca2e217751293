"""Turn pydantic validation errors into one InputError naming file, line, field path and expectation."""

from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from fsdp_orch.errors import InputError
from fsdp_orch.yamlio import YamlDoc


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo in ``max_restarts`` must not silently mean zero restarts."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def validate_doc(model: type[BaseModel], doc: YamlDoc, data: dict[str, Any] | None = None) -> Any:
    try:
        return model.model_validate(doc.data if data is None else data)
    except ValidationError as exc:
        raise to_input_error(exc, model, doc) from None


def to_input_error(exc: ValidationError, model: type[BaseModel], doc: YamlDoc) -> InputError:
    errors = exc.errors(include_url=False)
    messages = [_describe(err, model) for err in errors]
    first = errors[0]
    loc = _clean_loc(first["loc"])
    extra = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''}: " + \
        "; ".join(f"{p}: {m}" for p, m in messages[1:4]) + ")" if len(errors) > 1 else ""
    field_path, detail = messages[0]
    return InputError(detail + extra, file=doc.file, field=field_path or None,
                      line=doc.line_of(loc))


def _clean_loc(loc: tuple[Any, ...]) -> tuple[str | int, ...]:
    # pydantic adds validator names to locations ("function-after[...]"); keep the real fields.
    return tuple(p for p in loc if isinstance(p, int) or "[" not in p)


def _describe(err: dict[str, Any], model: type[BaseModel]) -> tuple[str, str]:
    loc = _clean_loc(err["loc"])
    path = ".".join(str(p) for p in loc)
    kind = err["type"]
    given = err.get("input")
    if kind == "extra_forbidden":
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
    if "got" not in msg and kind not in ("missing",):
        msg += f"; got {_short(given)}"
    return path, msg


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fields_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """Field names (and aliases) of the model reached by following ``loc`` from ``model``."""
    current: Any = model
    for part in loc:
        current = _model_of(current, part)
        if current is None:
            return []
    if isinstance(current, type) and issubclass(current, BaseModel):
        names = list(current.model_fields)
        extra = getattr(current, "accepted_aliases", ())
        return names + list(extra)
    return []


def _model_of(current: Any, part: str | int) -> Any:
    if isinstance(current, type) and issubclass(current, BaseModel):
        info = current.model_fields.get(str(part))
        return _unwrap(info.annotation) if info else None
    return _unwrap(current)


def _unwrap(tp: Any) -> Any:
    for arg in typing.get_args(tp) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
        inner = _unwrap(arg)
        if inner is not None:
            return inner
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    return None
