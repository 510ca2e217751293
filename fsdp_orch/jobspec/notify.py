"""``notify:``, in a job spec or a cluster profile: webhooks POSTed when the job's state changes or
chosen events happen."""

from __future__ import annotations

import difflib
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from fsdp_orch.jobspec.durations import parse_duration
from fsdp_orch.jobspec.secrets import HeaderOrRef, SecretRef
from fsdp_orch.jobspec.validation import StrictModel
from fsdp_orch.vocab.inputs import control_character
from fsdp_orch.vocab.states import JobState

STATES = tuple(s.value for s in JobState)
# Events worth a POST of their own (their names as ``fsdp-orch events`` shows them).
EVENTS = ("failure_detected", "restart_scheduled", "checkpoint_committed", "allocation_requeued")
DEFAULT_ON = tuple(s.value for s in (JobState.SUCCEEDED, JobState.INCOMPLETE, JobState.FAILED,
                                     JobState.CANCELLED))


class Webhook(StrictModel):
    url: str
    when: list[str] = Field(default_factory=lambda: list(DEFAULT_ON))  # or "on" (see _on_is_when)
    format: Literal["json", "slack"] = "json"
    retry_for: Annotated[float, BeforeValidator(parse_duration, json_schema_input_type=float | str),
                         Field(gt=0)] = 600.0
    # a value, or {from_env:}/{from_file:}
    headers: dict[str, HeaderOrRef] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _on_is_when(cls, data: object) -> object:
        # YAML 1.1 reads a bare ``on:`` key as the boolean true; both spellings mean ``when``.
        if not isinstance(data, dict):
            return data
        spellings = [key for key in (True, "on") if key in data]
        if not spellings:
            return data
        if len(spellings) > 1 or "when" in data:
            raise ValueError("expected one of on: or when: (they are the same field), not both")
        data = dict(data)
        data["when"] = data.pop(spellings[0])
        return data

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http:// or https:// URL; got {value!r}")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str | SecretRef]) -> dict[str, str | SecretRef]:
        # CR/LF would split the request (header injection); the notifier would only fail on it after
        # retry_for. Checked here, when the spec is loaded. The message names the header, never its
        # value (often a token): saying "got" keeps the loader from quoting it.
        for name, text in value.items():
            problem = control_character(name)
            if problem is not None or not name.strip():
                raise ValueError(f"header name {name!r}: expected a name without control "
                                 "characters; got "
                                 + (f"one holding {problem}" if problem else "an empty name"))
            # a reference: at submit
            problem = control_character(text) if isinstance(text, str) else None
            if problem is not None:
                raise ValueError(f"header {name!r}: expected a value without control characters; "
                                 f"got one holding {problem}")
        return value

    @field_validator("when")
    @classmethod
    def _when(cls, value: list[str]) -> list[str]:
        known = STATES + EVENTS
        for name in value:
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"unknown state or event {name!r}{hint}; "
                                 f"expected one of {', '.join(known)}")
        if not value:
            raise ValueError("expected at least one state or event")
        return value


__all__ = ["DEFAULT_ON", "EVENTS", "STATES", "Webhook"]
