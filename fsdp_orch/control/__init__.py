"""Submit, cancel, wait, follow, liveness, warm start: what the CLI and the Python API call."""
