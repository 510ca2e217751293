"""Loading a job spec: YAML, an accelerate config's implied fields, ``--set`` overrides, then the
schema's validation, with each error attributed to the file (and line) its value came from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdp_orch.jobspec.accelerate import merge_accelerate_doc
from fsdp_orch.jobspec.fsdp_options import fsdp_name
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.jobspec.validation import FieldOrigin, reattribute, validate_doc
from fsdp_orch.jobspec.yamlio import YamlDoc, load_file, load_mapping
from fsdp_orch.vocab.errors import InputError

# Fields whose values reach the program as strings: an unquoted ``3.10`` there means "3.10".
LITERAL_FIELDS = ("args", "command", "env")


def load_job(path: Path, overrides: list[str] | None = None,
             accelerate_config: Path | None = None) -> tuple[JobSpec, YamlDoc]:
    """Load, apply accelerate config and ``--set`` overrides, validate. Raises InputError.

    An error in a value that came from the accelerate config or a ``--set`` names that source.
    """
    doc = load_file(path, "job spec")
    data = doc.data_with_text(LITERAL_FIELDS)
    origins: dict[tuple[str, ...], FieldOrigin] = {}
    accel_path = accelerate_config
    # an empty one is left to the schema to refuse, naming the field (it was the job's folder)
    if accel_path is None and isinstance(data.get("accelerate_config"), str) \
            and data["accelerate_config"].strip():
        accel_path = path.parent / Path(data["accelerate_config"]).expanduser()
    if accel_path is not None:
        data, origins = merge_accelerate_doc(data, load_file(accel_path, "accelerate config"))
    for item in overrides or []:
        data = apply_override(data, item)
        key = tuple(part.strip() for part in item.partition("=")[0].split("."))
        origins = {k: v for k, v in origins.items() if k[:len(key)] != key}
        origins[key] = FieldOrigin("--set")
    try:
        return validate_doc(JobSpec, doc, data), doc
    except InputError as exc:
        raise reattribute(exc, origins) from None


def load_job_text(text: str, file: str = "job.yaml") -> JobSpec:
    """Validate a job spec given as text (no accelerate config, no overrides). Raises InputError."""
    doc = load_mapping(text, file)
    return validate_doc(JobSpec, doc, doc.data_with_text(LITERAL_FIELDS))


def apply_override(data: dict[str, Any], item: str) -> dict[str, Any]:
    """``--set a.b=value``: the value is parsed as YAML (so ``2``, ``true``, ``[a, b]`` work).

    ``env.NAME=value`` is the exception: environment values are taken literally, never as YAML.
    """
    import yaml

    key, sep, raw = item.partition("=")
    parts = [part.strip() for part in key.split(".")]
    if not sep or not all(parts):
        raise InputError(f"expected KEY.PATH=VALUE, got {item!r}", file="--set")
    if len(parts) >= 2 and parts[-2] == "env":
        value: Any = raw
    else:
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError):
            value = raw  # not YAML (or a YAML the constructor refuses): the text itself
    out = _deep_copy(data)
    node = out
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = {}
        elif not isinstance(child, dict):
            raise InputError(f"cannot set inside {'.'.join(parts[:i + 1])!r}: it is not a mapping",
                             file="--set", field=".".join(parts))
        node[part] = dict(child)
        node = node[part]
    if len(parts) == 2 and parts[0] == "fsdp":  # replace the option however it was spelled
        for spelled in [k for k in node
                        if isinstance(k, str) and fsdp_name(k) == fsdp_name(parts[1])]:
            del node[spelled]
    node[parts[-1]] = value
    return out


def _deep_copy(data: dict[str, Any]) -> dict[str, Any]:
    return {k: (_deep_copy(v) if isinstance(v, dict) else v) for k, v in data.items()}
