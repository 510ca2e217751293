"""The ``fsdp-orch`` command line. Thin: parse arguments, call the library, print.

Each command is a module of ``cli/commands``, imported only when it is named; only the standard
library is imported at start-up, and each command imports what it needs, so ``fsdp-orch --help``
and ``fsdp-orch status`` stay fast on a login node (no torch, no submitit).
"""

from __future__ import annotations

import os
import sys

from fsdp_orch.cli.commands import NAMES, command
from fsdp_orch.vocab.errors import FsdpOrchError
from fsdp_orch.vocab.version import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser, or only ``only``'s (start-up time on a login node)."""
    import argparse

    from fsdp_orch.cli.help_text import epilog

    parser = argparse.ArgumentParser(
        prog="fsdp-orch", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run multi-node PyTorch FSDP jobs on real clusters and keep them alive.",
        epilog=epilog(None))
    parser.add_argument("-V", "--version", action="version", version=f"fsdp-orch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in NAMES:
        if only is not None and name != only:
            continue
        module = command(name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP[:1].upper()
                           + module.HELP[1:] + ".", epilog=epilog(name),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(func=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    from fsdp_orch.bootstrap.user_umask import remember_user_umask

    # What the CLI and its children create is this user's alone (places/private); the user's own
    # umask is kept for what the job's program writes (bootstrap.user_umask).
    remember_user_umask(os.umask(0o077))
    argv = sys.argv[1:] if argv is None else argv
    args = command("status").plain(argv) if argv[:1] == ["status"] else None
    if args is None:
        wanted = next((a for a in argv if not a.startswith("-")), None)
        parser = build_parser(only=wanted if wanted in NAMES else None)
        args = parser.parse_args(argv)
    try:
        if command(args.command).USES_HOME:
            from fsdp_orch.cli.common import private_home

            private_home()
        return int(args.func(args))
    except FsdpOrchError as exc:
        print(f"fsdp-orch: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
