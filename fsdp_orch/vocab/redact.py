"""What fsdp-orch shows of values that may be secrets. A value that came by reference is never known
to what prints (only its ``{from_env:}``/``{from_file:}``); a plain value whose name says it is a
secret (``HF_TOKEN``, ``WANDB_API_KEY``, an ``Authorization`` header) is shown as ``***``. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
SECRET_NAME = re.compile(r"TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
SECRET_HEADER = re.compile(r"(PROXY-)?AUTHORIZATION|COOKIE", re.IGNORECASE)
# Shorter values are not masked in free text: "1" or "true" would blank out half a log.
MIN_MASKED_LENGTH = 6


def secret_name(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


def secret_header(name: str) -> bool:
    return SECRET_HEADER.fullmatch(name.strip()) is not None or secret_name(name)


def shown_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """``env`` as shown: references as written, plain values of secret-named variables masked."""
    return {name: MASK if isinstance(value, str) and secret_name(name) else value
            for name, value in env.items()}


def shown_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    return {name: MASK if isinstance(value, str) and secret_header(name) else value
            for name, value in headers.items()}


def shown_spec(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A job spec document (``job.json``, a ``submitted`` event's spec) as shown."""
    shown = dict(doc)
    if isinstance(shown.get("env"), dict):
        shown["env"] = shown_env(shown["env"])
    if isinstance(shown.get("notify"), list):
        shown["notify"] = [{**hook, "headers": shown_headers(hook["headers"])}
                           if isinstance(hook, dict) and isinstance(hook.get("headers"), dict)
                           else hook
                           for hook in shown["notify"]]
    return shown


def shown_event(event: dict[str, Any]) -> dict[str, Any]:
    """An event as ``events --json`` prints it: the spec a ``submitted`` event carries, as shown."""
    import json

    text = event.get("spec_json")
    if not isinstance(text, str):
        return event
    try:
        doc = json.loads(text)
    except ValueError:
        return {**event, "spec_json": MASK}  # not a spec: nothing of it can be shown safely
    if not isinstance(doc, dict):
        return {**event, "spec_json": MASK}
    return {**event, "spec_json": json.dumps(shown_spec(doc), indent=2, sort_keys=True) + "\n"}


def masked(text: str, values: Iterable[str]) -> str:
    """``text`` with every occurrence of ``values``
    (long enough to be secrets) replaced by ``***``."""
    for value in sorted({v for v in values if len(v) >= MIN_MASKED_LENGTH}, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


__all__ = ["MASK", "masked", "secret_header", "secret_name", "shown_env", "shown_event",
           "shown_headers", "shown_spec"]
