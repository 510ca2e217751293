"""``fsdp-orch diagnose``: the failure in log files classified."""

from __future__ import annotations

from fsdp_orch.cli.common import EXIT_OK
from fsdp_orch.vocab.errors import InputError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

HELP = "classify the failure in log files (category, retryable, evidence)"
USES_HOME = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="a log to classify (a node's log, slurm-1234.out, ...); several allowed")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per file (a list for several files)")


def run(args: argparse.Namespace) -> int:
    import json

    from fsdp_orch.supervise.attempt_archive import read_log
    from fsdp_orch.supervise.diagnose import diagnose_text

    results = []
    for name in args.files:
        try:  # an ended attempt's archived log (.gz) reads as the log it was
            text = read_log(name).decode("utf-8", errors="replace")
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror}", file=name) from None
        results.append({"file": name, **diagnose_text(text).to_json()})
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
        return EXIT_OK
    for r in results:
        retry = "retryable" if r["retryable"] else "not retryable"
        where = f" (line {r['line']})" if r["line"] else ""
        print(f"{r['file']}: {r['category']} ({retry}){where}")
        if r["evidence"]:
            print(f"  {r['evidence']}")
        print(f"  hint: {r['hint']}")
    return EXIT_OK
