"""`fsdp-orch status [--json]`, what pipelines poll, skips argparse: it must read the command line
exactly as argparse would, and leave every other one to argparse."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("argv", [["status"], ["status", "--json"]])
def test_the_plain_status_fast_path_reads_its_command_line_as_argparse_does(
        argv: list[str]) -> None:
    from fsdp_orch.cli.commands.status import plain as _plain_status
    from fsdp_orch.cli.main import build_parser

    assert vars(_plain_status(argv)) == vars(build_parser(only="status").parse_args(argv))
    assert _plain_status([*argv, "--all"]) is None and _plain_status(["status", "abc"]) is None
