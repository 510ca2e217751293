"""Secrets by reference: an ``env:`` value or a webhook header written as ``{from_env: NAME}`` or
``{from_file: PATH}`` instead of the value itself. The spec, and every file made from it, holds only
the reference; the value is read at submit (``resolve_references``) and handed on without being
written where the job's files are (``places/secrets`` keeps it, 0600 in the private home, while a
supervisor or notifier on this machine may need it again)."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, model_serializer, model_validator

from fsdp_orch.jobspec.validation import StrictModel, env_name_problem
from fsdp_orch.vocab.errors import InputError
from fsdp_orch.vocab.inputs import control_character

# A secret file bigger than this is a wrong path (a dataset, a key ring), not a token.
MAX_SECRET_BYTES = 64 * 1024


class SecretRef(StrictModel):
    """Where a value comes from: the submitting process's environment, or a file only its owner can
    read (as ssh wants of a private key)."""

    from_env: str | None = None
    from_file: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> SecretRef:
        if (self.from_env is None) == (self.from_file is None):
            raise ValueError("expected exactly one of from_env: NAME or from_file: PATH")
        if self.from_env is not None:
            problem = env_name_problem(self.from_env)
            if problem:
                raise ValueError(f"from_env: {problem}")
        if self.from_file is not None and not self.from_file.strip():
            raise ValueError("from_file: expected a path; got an empty one")
        return self

    @model_serializer
    def _as_written(self) -> dict[str, str]:
        return ({"from_env": self.from_env} if self.from_env is not None
                else {"from_file": str(self.from_file)})

    @property
    def source(self) -> str:
        """Where the value comes from, in words a user can act on (what ``render`` shows)."""
        return (f"from_env {self.from_env}" if self.from_env is not None
                else f"from_file {self.from_file}")


def _plain_or_reference(value: Any) -> Any:
    """A mapping is a reference; anything else is a plain value
    (numbers and booleans as written)."""
    if isinstance(value, dict):
        return SecretRef.model_validate(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


def _no_nul(value: str | SecretRef) -> str | SecretRef:
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("must not contain NUL bytes (a program cannot receive them)")
    return value


# An ``env:`` value: the text itself, or where to read it at submit.
ValueOrRef = Annotated[str | SecretRef, BeforeValidator(_plain_or_reference),
                       AfterValidator(_no_nul)]
# A webhook header's value (its own validator refuses every control character, naming the header).
HeaderOrRef = Annotated[str | SecretRef, BeforeValidator(_plain_or_reference)]


def references(values: Mapping[str, str | SecretRef]) -> dict[str, SecretRef]:
    return {name: value for name, value in values.items() if isinstance(value, SecretRef)}


def plain(values: Mapping[str, str | SecretRef]) -> dict[str, str]:
    return {name: value for name, value in values.items() if isinstance(value, str)}


def _read_secret_file(path: str, field: str, base_dir: str) -> str:
    full = os.path.join(base_dir, os.path.expanduser(path))  # relative: to the file that names it
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(f"from_file {path}: no such file", field=field) from None
    except OSError as exc:
        raise InputError(f"from_file {path}: cannot read it ({exc.strerror})",
                         field=field) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # checked before fdopen, which refuses a folder itself
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise InputError(f"from_file {path}: expected a regular file, got {kind}", field=field)
    with os.fdopen(fd, "rb") as handle:
        if info.st_uid != os.geteuid():
            raise InputError(f"from_file {path}: owned by uid {info.st_uid}, not by you (uid "
                             f"{os.geteuid()}); a secret must be your own file", field=field)
        if info.st_mode & 0o077:
            raise InputError(f"from_file {path}: mode {stat.S_IMODE(info.st_mode):04o} lets others "
                             f"read or write it; make it private: chmod 600 {path}", field=field)
        data = handle.read(MAX_SECRET_BYTES + 1)
    if len(data) > MAX_SECRET_BYTES:
        raise InputError(f"from_file {path}: larger than {MAX_SECRET_BYTES // 1024} KiB; "
                         "expected a secret, not a data file", field=field)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"from_file {path}: expected UTF-8 text", field=field) from None
    # Files written by `echo` or an editor end in a line break that is not part of the token.
    return text.removesuffix("\n").removesuffix("\r")


def resolve(ref: SecretRef, environ: Mapping[str, str], field: str, base_dir: str = ".") -> str:
    """The value ``ref`` points at; InputError naming ``field`` (never the value) when it cannot be
    had. ``base_dir``: what a relative ``from_file`` is relative to."""
    if ref.from_env is not None:
        if ref.from_env not in environ:
            raise InputError(f"from_env {ref.from_env}: not set in the environment of this "
                             "command; export it before submitting", field=field)
        value = environ[ref.from_env]
    else:
        value = _read_secret_file(str(ref.from_file), field, base_dir)
    if "\x00" in value:
        raise InputError(f"{ref.source}: the value holds a NUL byte, "
                         "which no environment can carry", field=field)
    return value


def resolve_headers(headers: Mapping[str, str | SecretRef], environ: Mapping[str, str],
                    field: str, base_dir: str = ".") -> dict[str, str]:
    """The values of ``headers``' references, by header name; a value with a line break is refused
    (it would split the request)."""
    values = {}
    for name, ref in references(headers).items():
        value = resolve(ref, environ, f"{field}.{name}", base_dir)
        problem = control_character(value)
        if problem is not None:
            raise InputError(f"{ref.source}: expected a header value without control "
                             f"characters; it holds {problem}",
                             field=f"{field}.{name}")
        values[name] = value
    return values




def _in_file(exc: InputError, file: str) -> InputError:
    return InputError(exc.detail, file=file, field=exc.field)


def resolve_submission(profile: Any, job: Any, environ: Mapping[str, str], job_file: str,
                       profile_file: str) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The values a job's references point at: (env values by name, header values by webhook index
    in the profile's webhooks then the job's, as a string). InputError naming the file and field of
    the first reference that cannot be had; nothing is written."""
    env_values: dict[str, str] = {}
    for name, ref in references({**profile.env, **job.env}).items():
        file = job_file if name in job.env else profile_file
        try:
            env_values[name] = resolve(ref, environ, f"env.{name}", os.path.dirname(file))
        except InputError as exc:
            raise _in_file(exc, file) from None
    header_values: dict[str, dict[str, str]] = {}
    hooks = [(profile_file, i, hook) for i, hook in enumerate(profile.notify)]
    hooks += [(job_file, i, hook) for i, hook in enumerate(job.notify)]
    for place, (file, i, hook) in enumerate(hooks):
        try:
            values = resolve_headers(hook.headers, environ, f"notify.{i}.headers",
                                     os.path.dirname(file))
        except InputError as exc:
            raise _in_file(exc, file) from None
        if values:
            header_values[str(place)] = values
    return env_values, header_values


__all__ = ["HeaderOrRef", "SecretRef", "ValueOrRef", "plain", "references", "resolve",
           "resolve_headers", "resolve_submission"]
