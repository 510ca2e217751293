"""``fsdp-orch schema job|profile`` is what an editor shows while a user writes a file: every field
has a description (from ``jobspec.field_docs``, the source docs/reference/fields.md shows too), the
schema uses only JSON Schema 2020-12's own keywords (an editor ignores any other, and a bound
written in one is no bound), every example file validates against it, and a bad value fails it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from fsdp_orch.cli.commands.schema import json_schema
from fsdp_orch.jobspec.field_docs import FIELD_DOCS, PROFILE_BASE

REPO = Path(__file__).resolve().parents[2]

# Every keyword of the 2020-12 vocabularies (core, applicator, unevaluated, validation, meta-data,
# format-annotation, content): https://json-schema.org/draft/2020-12/json-schema-core and
# json-schema-validation, section by section.
STANDARD = {
    "$schema", "$id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary",
    "$comment", "$defs",
    "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "prefixItems",
    "items", "contains", "properties", "patternProperties", "additionalProperties",
    "propertyNames", "unevaluatedItems", "unevaluatedProperties",
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems",
    "uniqueItems", "maxContains", "minContains", "maxProperties", "minProperties", "required",
    "dependentRequired",
    "title", "description", "default", "deprecated", "readOnly", "writeOnly", "examples",
    "format", "contentEncoding", "contentMediaType", "contentSchema",
}
SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "dependentSchemas"}  # name -> schema
SCHEMA_LISTS = {"allOf", "anyOf", "oneOf", "prefixItems"}
SCHEMAS = {"not", "if", "then", "else", "items", "contains", "additionalProperties",
           "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema"}


def subschemas(node: Any, where: str = "#") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema in ``node`` (itself first), with its JSON pointer; values (default, enum,
    const, examples) are not schemas and are not entered."""
    if not isinstance(node, dict):
        return  # true/false schemas
    yield where, node
    for key, value in node.items():
        if key in SCHEMA_MAPS:
            for name, sub in value.items():
                yield from subschemas(sub, f"{where}/{key}/{name}")
        elif key in SCHEMA_LISTS:
            for n, sub in enumerate(value):
                yield from subschemas(sub, f"{where}/{key}/{n}")
        elif key in SCHEMAS:
            yield from subschemas(value, f"{where}/{key}")


@pytest.mark.parametrize("what", ["job", "profile"])
def test_every_field_has_a_description(what: str) -> None:
    missing, fields = [], 0
    for where, node in subschemas(json_schema(what)):
        for name, prop in node.get("properties", {}).items():
            fields += 1
            if not str(prop.get("description", "")).strip():
                missing.append(f"{where}/properties/{name}")
    assert fields >= (90 if what == "job" else 80), fields
    assert not missing, f"no description: {missing}"


def test_every_description_is_of_a_field_the_models_have() -> None:
    """A field renamed or removed leaves no description behind that no editor can show."""
    have: dict[str, set[str]] = {}
    for what in ("job", "profile"):
        for _, node in subschemas(json_schema(what)):
            if isinstance(node.get("title"), str) and "properties" in node:
                have.setdefault(node["title"], set()).update(node["properties"])
    have["JobSpec"] = have.pop("fsdp-orch job")
    kinds = [title for title in have if title.endswith("Profile")]
    assert len(kinds) >= 4, kinds
    for model, docs in FIELD_DOCS.items():
        if model == PROFILE_BASE:
            stale = [f for f in docs if not all(f in have[kind] for kind in kinds)]
        else:
            stale = sorted(set(docs) - have.get(model, set()))
        assert not stale, f"{model}: described but not a field: {stale}"


@pytest.mark.parametrize("what", ["job", "profile"])
def test_only_standard_keywords(what: str) -> None:
    schema = json_schema(what)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    unknown = [f"{where}: {key}" for where, node in subschemas(schema) for key in node
               if key not in STANDARD]
    assert not unknown, unknown


def test_every_example_validates_and_bad_values_fail() -> None:
    job_schema, profile_schema = json_schema("job"), json_schema("profile")
    jobs = sorted((REPO / "examples").rglob("job.yaml"))
    profiles = sorted((REPO / "clusters").glob("*.yaml"))
    assert len(jobs) >= 10 and len(profiles) >= 4, (jobs, profiles)
    for path in jobs:
        jsonschema.validate(yaml.safe_load(path.read_text()), job_schema)
    for path in profiles:
        jsonschema.validate(yaml.safe_load(path.read_text()), profile_schema)
    for backoff in ({"initial": -5}, {"max": "-1"}, {"multiplier": 0.5}):
        bad = {"name": "j", "script": "t.py", "restart": {"backoff": backoff}}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, job_schema)
    with pytest.raises(jsonschema.ValidationError, match="-5"):
        jsonschema.validate({"name": "j", "script": "t.py",
                             "restart": {"backoff": {"initial": -5}}}, job_schema)


def test_the_field_reference_shows_the_same_descriptions() -> None:
    """One source: docs/reference/fields.md shows each field's description from field_docs."""
    text = (REPO / "docs" / "reference" / "fields.md").read_text()
    for model, field in (("Watch", "node_timeout"), ("Backoff", "initial"),
                         ("SlurmProfile", "signal_delay"), (PROFILE_BASE, "description")):
        assert FIELD_DOCS[model][field] in text, (model, field)


def test_schema_imports_no_torch() -> None:
    code = ("import sys, contextlib, io\nfrom fsdp_orch.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    assert main(['schema', 'profile']) == 0 and main(['schema', 'job']) == 0\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "print(out.getvalue().count('description'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout) >= 170
    json.loads(subprocess.run([sys.executable, "-m", "fsdp_orch", "schema", "job"],
                              capture_output=True, text=True, timeout=120, cwd=REPO).stdout)


def test_a_webhooks_retry_for_takes_a_duration_in_the_schema() -> None:
    """``retry_for: 10m`` loads (the loader parses durations); the schema an editor uses must not
    flag it."""
    schema = json_schema("job")
    doc = {"name": "n", "script": "train.py",
           "notify": [{"url": "https://example.invalid/hook", "retry_for": "10m"}]}
    jsonschema.validate(doc, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "notify": [{**doc["notify"][0], "retry_for": "-5s"}]}, schema)
