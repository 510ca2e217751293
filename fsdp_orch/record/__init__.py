"""What happened to a job: the event log, the journal that writes it,
the index (a cache) that reads it."""
