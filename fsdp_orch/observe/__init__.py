"""Reading what running ranks leave behind: heartbeats, logs, stacks, processes; the command runner
(checkpoints have a package of their own: fsdp_orch.checkpoints)."""
