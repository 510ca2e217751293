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


def test_status_json_imports_no_record_model(tmp_path) -> None:
    """`status --json` over an index prints the documents SQLite keeps: the record model (event
    dataclasses, JobStatus, the fold) and the id checks' regexes are imported only where a running
    job's live step has to be folded in, or an id was given."""
    import os
    import subprocess
    import sys

    from fsdp_orch.places.home import store_path
    from fsdp_orch.record.status import JobStatus
    from fsdp_orch.record.store import Store

    with Store(store_path(str(tmp_path))) as store:
        for i, state in enumerate(("SUCCEEDED", "RUNNING")):
            store.put(JobStatus(id=f"{i:012x}", name="job", cluster="local", kind="local",
                                run_dir=str(tmp_path / "runs" / f"{i:012x}"),
                                created_at=1_700_000_000.0 + i, state=state))
    heavy = ["fsdp_orch.record.event_types", "fsdp_orch.record.status", "fsdp_orch.record.fold",
             "fsdp_orch.vocab.inputs", "dataclasses", "re"]
    code = ("import io, sys\n"
            "from fsdp_orch.cli.main import main\n"
            "sys.stdout = io.TextIOWrapper(io.BytesIO())\n"
            "main(['status', '--json'])\n"
            "sys.stdout.flush()\n"
            f"print(' '.join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)\n")
    for _ in range(2):  # the second: the profiles' shared dirs are cached in the index
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                              text=True, check=True,
                              env={**os.environ, "FSDP_ORCH_HOME": str(tmp_path)})
    assert proc.stderr.splitlines()[-1].split() == []
