"""``fsdp-orch clusters``: the cluster profiles and where each came from."""

from __future__ import annotations

from fsdp_orch.cli.common import EXIT_OK
from fsdp_orch.vocab.errors import FsdpOrchError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any

HELP = "list cluster profiles and where each came from"
USES_HOME = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="print a JSON list: name, kind, origin, path, description, refused")


def run(args: argparse.Namespace) -> int:
    import json

    from fsdp_orch.backends.registry import parse_profile
    from fsdp_orch.jobspec.profiles import discover

    refs = discover()
    rows: list[dict[str, Any]] = []  # JSON rows
    for name, ref in sorted(refs.items()):
        if ref.refused is not None:  # not read: it is not the user's to use
            kind, desc = "?", f"refused: {ref.refused}"
        else:
            try:
                profile = parse_profile(ref.path)
                kind, desc = profile.kind, profile.description
            except FsdpOrchError as exc:
                kind, desc = "?", f"invalid: {exc}"
        rows.append({"name": name, "kind": kind, "origin": ref.origin, "path": str(ref.path),
                     "description": desc, "refused": ref.refused})
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    from fsdp_orch.cli.status_table import format_rows

    shown = [{**row, "origin": row["origin"] + (" REFUSED" if row["refused"] else "")}
             for row in rows]
    print(format_rows(["name", "kind", "origin", "path"], shown))
    for name, ref in sorted(refs.items()):
        if ref.refused is not None:
            print(f"refused {name} ({ref.path}): {ref.refused}; a profile decides what runs as "
                  "you: it must be yours (or root's), and writable by no one else, and so must "
                  "each folder above it")
    for row in rows:
        if row["kind"] == "?" and not row["refused"]:
            print(f"{row['description']}")  # invalid: the loader's line, naming file and field
    return EXIT_OK
