"""``fsdp-orch schema job|profile``: the JSON Schema of a job file or of a cluster profile, from the
same pydantic models the loader checks with, for editors (``yaml-language-server: $schema=...``)."""

from __future__ import annotations

from fsdp_orch.cli.common import EXIT_OK

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any

HELP = "print the JSON Schema of a job file or a cluster profile (for editors)"
USES_HOME = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Print the JSON Schema of a job file (job) or of a cluster profile (profile: "
                     "one of the kinds, by its kind field). An editor with the YAML language "
                     "server validates a file whose first line is "
                     "'# yaml-language-server: $schema=./job.schema.json'.")
    p.add_argument("what", choices=("job", "profile"),
                   help="job: a job file's schema; profile: a cluster profile's (any kind)")


DIALECT = "https://json-schema.org/draft/2020-12/schema"
# pydantic's names for the bounds of a value it cannot map to a JSON type (a duration: a number or
# a string), and the standard keywords for them, which apply to the numbers alone
STANDARD_BOUNDS = {"gt": "exclusiveMinimum", "ge": "minimum", "lt": "exclusiveMaximum",
                   "le": "maximum"}
# A duration (jobspec.durations) is a number of seconds or a string: its string as the loader
# reads it (90s, 1h30m, 250ms, "30"; spaces and case ignored), so "-5s" fails in the editor too.
DURATION = [{"type": "number"}, {"type": "string"}]
_AMOUNT = r"[0-9]+(\.[0-9]+)? *"
DURATION_TEXT = rf"^ *({_AMOUNT}|({_AMOUNT}([mM][sS]|[sSmMhHdD]) *)+)$"


def json_schema(what: str) -> dict:  # type: ignore[type-arg]
    """The schema of ``what`` (job or profile), as pydantic writes it, in standard keywords, with
    each field's description (``jobspec.field_docs``, as docs/reference/fields.md has them)."""
    from fsdp_orch.jobspec.field_docs import described

    if what == "job":
        from fsdp_orch.jobspec.schema import JobSpec

        schema = described(JobSpec.model_json_schema())
        schema["title"] = "fsdp-orch job"
        return {"$schema": DIALECT, **standard(schema)}
    from fsdp_orch.backends.registry import cluster_kind, kind_names

    defs: dict = {}  # type: ignore[type-arg]
    kinds = []
    for name in kind_names():
        schema = described(cluster_kind(name).profile_model.model_json_schema())
        defs.update(schema.pop("$defs", {}))  # refs resolve from the root: one $defs there
        kinds.append(schema)
    return {"$schema": DIALECT, "title": "fsdp-orch cluster profile",
            **standard({"anyOf": kinds, "$defs": defs})}


def standard(node: Any) -> Any:
    """``node`` with pydantic's ``gt``/``ge``/``lt``/``le`` as the standard keywords, and a
    duration's string held to the loader's forms. Pure."""
    if isinstance(node, list):
        return [standard(item) for item in node]
    if not isinstance(node, dict):
        return node
    bounds = {STANDARD_BOUNDS[k]: v for k, v in node.items()
              if k in STANDARD_BOUNDS and isinstance(v, (int, float))}
    if node.get("anyOf") == DURATION:
        node = {**node, "anyOf": [DURATION[0], {"type": "string", "pattern": DURATION_TEXT}]}
    return {**{k: standard(v) for k, v in node.items() if k not in STANDARD_BOUNDS or
               not isinstance(v, (int, float))}, **bounds}


def run(args: argparse.Namespace) -> int:
    import json

    print(json.dumps(json_schema(args.what), indent=2, sort_keys=True))
    return EXIT_OK
