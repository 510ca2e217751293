"""``fsdp-orch schema job|profile``: the JSON Schema of a job file or of a cluster profile, from the
same pydantic models the loader checks with, for editors (``yaml-language-server: $schema=...``)."""

from __future__ import annotations

from fsdp_orch.cli.common import EXIT_OK

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

HELP = "print the JSON Schema of a job file or a cluster profile (for editors)"
USES_HOME = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Print the JSON Schema of a job file (job) or of a cluster profile (profile: "
                     "one of the kinds, by its kind field). An editor with the YAML language "
                     "server validates a file whose first line is "
                     "'# yaml-language-server: $schema=./job.schema.json'.")
    p.add_argument("what", choices=("job", "profile"))


def json_schema(what: str) -> dict:  # type: ignore[type-arg]
    """The schema of ``what`` (job or profile), as pydantic writes it."""
    if what == "job":
        from fsdp_orch.jobspec.schema import JobSpec

        schema = JobSpec.model_json_schema()
        schema["title"] = "fsdp-orch job"
        return schema
    from fsdp_orch.backends.registry import cluster_kind, kind_names

    defs: dict = {}  # type: ignore[type-arg]
    kinds = []
    for name in kind_names():
        schema = cluster_kind(name).profile_model.model_json_schema()
        defs.update(schema.pop("$defs", {}))  # refs resolve from the root: one $defs there
        kinds.append(schema)
    return {"title": "fsdp-orch cluster profile", "anyOf": kinds, "$defs": defs}


def run(args: argparse.Namespace) -> int:
    import json

    print(json.dumps(json_schema(args.what), indent=2, sort_keys=True))
    return EXIT_OK
