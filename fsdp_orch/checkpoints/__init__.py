"""What a checkpoint is, seen from the supervisor: found, judged complete or partial, and moved
aside, without torch."""
