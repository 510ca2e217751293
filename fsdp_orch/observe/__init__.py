"""Reading what running ranks leave behind: heartbeats, logs, checkpoints, stacks, processes; the command runner."""
