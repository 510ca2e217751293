"""Webhook notifications: a detached notifier per job reads the job's event log and POSTs each
configured state change or event once, retrying with backoff; the supervisor never waits on it.
``due`` and ``payload`` are pure; ``delivery`` is the loop; ``process`` starts and runs it."""
