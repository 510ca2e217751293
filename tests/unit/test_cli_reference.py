"""docs/reference/cli.md says what the parser says: its command reference is generated from
``fsdp_orch.cli.main.build_parser`` by scripts/gen_cli_reference.py, every command and sub-command
and every argument with its help; a flag added, renamed or re-worded without regenerating fails
here, and so does a flag with no help to show."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "reference" / "cli.md"


def _commands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every (sub-)command parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _commands(sub)


def test_the_cli_reference_is_what_the_parser_says() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_cli_reference.py"),
                           "--check"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_every_command_and_flag_is_in_the_reference_with_its_help() -> None:
    from fsdp_orch.cli.main import build_parser

    text = PAGE.read_text()
    seen = 0
    for parser in _commands(build_parser()):
        if parser.prog != "fsdp-orch":
            assert f"\n### {parser.prog}\n" in text, f"no section for {parser.prog}"
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction,
                                   argparse._VersionAction)):
                continue
            shown = formatter._format_action_invocation(action)
            assert (action.help or "").strip(), f"{parser.prog} {shown}: no help"
            assert f"| `{shown}`" in text, f"{parser.prog} {shown} is not in {PAGE.name}"
            seen += 1
    assert seen >= 60, seen  # every command's options, not a few
    for flag in ("### fsdp-orch schema", "`--gpu-memory SIZE`", "`--init-from JOB_ID|PATH`",
                 "`--token-file FILE`", "`--no-fit-check`", "### fsdp-orch schedule add"):
        assert flag in text, flag
