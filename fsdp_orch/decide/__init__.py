"""Every rule that decides an attempt's and a job's fate, pure: each takes what was observed and
the clock's reading, and returns a verdict; none sleeps, reads a file or a clock. The hang rule
and its vetoes (``watchdog``, ``hang_window``, ``frozen_rank``), the teardown rules
(``teardown``), the straggler rule (``stragglers``), where a failed job goes before its budget is
weighed (``after_failure``: requeued, a straggler's node left out, or the policy), the restart
budget and backoff (``policy``), and what one look at a running attempt leads to (``look``).
``supervise/`` observes and acts."""
