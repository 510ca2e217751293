"""The failure categories: what the classifier names and the restart policy retries. Stdlib only."""

FAILURE_CATEGORIES = (
    "hang", "nccl_timeout", "nccl_error", "gloo_timeout_or_peer_lost", "rendezvous_failure",
    "cuda_oom", "hardware_fault", "preemption_or_node_lost", "user_code_error",
    "checkpoint_error", "xla_error", "unknown",
)
# A bug in the script or a checkpoint it cannot read fails the same way on every attempt.
NOT_RETRYABLE = frozenset({"user_code_error", "checkpoint_error"})
DEFAULT_RETRY_ON = (
    "hang", "nccl_timeout", "nccl_error", "gloo_timeout_or_peer_lost", "rendezvous_failure",
    "hardware_fault", "preemption_or_node_lost", "cuda_oom", "unknown",
)
# The exit status a kind's attempt handle reports when a node stopped answering (an SSH host lost
# mid-run): outside the range of real exit statuses and signals.
NODE_LOST_EXIT = -1001
