"""Where fsdp-orch's files are: the home, the database, the built-in
templates and profiles. Stdlib only."""
