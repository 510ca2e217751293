"""``fsdp-orch report``: one self-contained HTML page of a job (its timeline, loss curve, goodput
breakdown and failures), drawn by our own code as inline SVG; pure, no network fetches."""
