"""``fsdp-orch clusters``: the cluster profiles and where each came from."""

from __future__ import annotations

from fsdp_orch.cli.common import EXIT_OK
from fsdp_orch.vocab.errors import FsdpOrchError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

HELP = "list cluster profiles and where each came from"
USES_HOME = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    import json

    from fsdp_orch.backends.registry import parse_profile
    from fsdp_orch.jobspec.profiles import discover

    refs = discover()
    rows = []
    for name, ref in sorted(refs.items()):
        try:
            profile = parse_profile(ref.path)
            kind, desc = profile.kind, profile.description
        except FsdpOrchError as exc:
            kind, desc = "?", f"invalid: {exc}"
        rows.append({"name": name, "kind": kind, "origin": ref.origin, "path": str(ref.path),
                     "description": desc})
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    from fsdp_orch.cli.status_table import format_rows

    print(format_rows(["name", "kind", "origin", "path"], rows))
    return EXIT_OK
