"""Heartbeat metrics that fsdp-orch itself reads (a script's own metrics are only carried along)."""

# Seconds rank 0's training was held up by the runtime's checkpoint saves so far in the attempt
# (``Checkpointer.block_seconds`` summed): the supervisor puts it on its progress events, goodput
# counts it as blocking checkpoint time.
CHECKPOINT_BLOCK_S = "checkpoint_block_s"
