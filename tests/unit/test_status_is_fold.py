"""The after-test check itself (tests/status_is_fold.py): it passes on a home whose index says what
the logs say, and names the job whose indexed status differs from the fold of its logs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cli_harness import make_cli
from status_is_fold import CHECKED, mismatches

from fsdp_orch.record.events import EventWriter
from fsdp_orch.record.index import open_index
from fsdp_orch.record.journal import Journal
from fsdp_orch.vocab.states import JobState


def test_the_check_passes_on_a_true_index_and_names_a_job_whose_index_lies(tmp_path: Path) -> None:
    cli = make_cli(tmp_path)
    CHECKED.add(id(cli))  # checked here, not again by the after-test fixture
    run_dir = cli.home / "runs" / "abc123"
    submit = Journal(EventWriter(run_dir, "submit"), "abc123")
    submit.submitted(name="n", cluster="local", kind="local", spec_json="{}", run_dir=str(run_dir),
                     job_file=None, spec_hash=None, idempotency_key=None)
    Journal(EventWriter(run_dir, "supervisor"), "abc123").set_state(JobState.SUCCEEDED)
    with open_index(str(cli.home)):  # what a submit makes: `status` alone never writes the index
        pass
    assert mismatches(cli) == []
    conn = sqlite3.connect(cli.home / "jobs.db")
    conn.execute("UPDATE jobs SET doc = json_set(doc, '$.state', 'FAILED')")  # an index that lies
    # past the cached list
    conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
    conn.commit()
    conn.close()
    wrong = mismatches(cli, tries=1)
    assert len(wrong) == 1 and wrong[0].startswith("abc123:") and '"FAILED"' in wrong[0]
