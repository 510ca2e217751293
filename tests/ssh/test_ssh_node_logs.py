"""Rank logs stay on the node (issue 45, item 5), on the real sshd hosts that share the run folder:
during steady training of a 2-host job the shared run folder sees at most 3 file changes a second
(polled: new files, or a changed mtime or size), ``logs`` and ``logs --rank`` read the ranks' lines
during the job, and once it is cancelled (the stop command copies what each host kept) the run
folder holds the whole of each host's logs. The copies at a normal end (each node's wrapper) are
checked by test_ssh_backend's hang test, whose first attempt is stopped and whose second ends."""

from __future__ import annotations

import pytest
from cli_harness import UNTIL_STOPPED, demo_args
from logs_on_node import node_logs_not_copied, steady_training_checked
from test_ssh_backend import TWO_HOSTS, on_hosts  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.root]


def test_a_two_host_job_changes_the_shared_run_folder_at_most_3_times_a_second(
        ssh_hosts, on_hosts) -> None:  # noqa: F811
    cli, demo = on_hosts
    job_id = cli.run("submit", "--cluster", "ssh", str(demo), *TWO_HOSTS,
                     "--set", demo_args(*UNTIL_STOPPED),  # a line a step, 0.1 s a step
                     "--set", "checkpoint.interval=50",  # the demo's own (TWO_HOSTS: 5)
                     check=True).stdout.split()[-1]
    run_dir = None
    try:
        run_dir = steady_training_checked(cli, job_id)
    finally:
        cli.run("cancel", job_id)
    assert cli.status(job_id)["state"] == "CANCELLED" and run_dir is not None
    assert node_logs_not_copied(run_dir / "attempt-0", job_id, (0, 1)) == []
