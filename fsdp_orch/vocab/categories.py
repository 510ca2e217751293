"""The failure categories: what the classifier names and the restart policy retries. Stdlib only."""

from __future__ import annotations

from fsdp_orch.vocab.states import Word


class FailureCategory(Word):
    HANG = "hang"
    NCCL_TIMEOUT = "nccl_timeout"
    NCCL_ERROR = "nccl_error"
    GLOO_TIMEOUT_OR_PEER_LOST = "gloo_timeout_or_peer_lost"
    RENDEZVOUS_FAILURE = "rendezvous_failure"
    CUDA_OOM = "cuda_oom"
    HARDWARE_FAULT = "hardware_fault"
    PREEMPTION_OR_NODE_LOST = "preemption_or_node_lost"
    USER_CODE_ERROR = "user_code_error"
    CHECKPOINT_ERROR = "checkpoint_error"
    XLA_ERROR = "xla_error"
    KILLED_SIGKILL = "killed_sigkill"
    CRASHED_SIGNAL = "crashed_signal"
    INJECTED_FAULT = "injected_fault"
    NO_RANKS_STARTED = "no_ranks_started"
    NODE_SETUP_ERROR = "node_setup_error"  # a node's launch script found what it needs missing
    # watch.stragglers: replace ended the attempt at a checkpoint to leave a straggler's node out
    STRAGGLER_REPLACED = "straggler_replaced"
    # the loss (or grad norm) the script logged went NaN/inf (checkpoints.suspect)
    NONFINITE_LOSS = "nonfinite_loss"
    # the first losses after a resume far from the loss logged when its checkpoint was saved
    LOSS_JUMP = "loss_jump"
    UNKNOWN = "unknown"


FAILURE_CATEGORIES = tuple(c.value for c in FailureCategory)
# A bug in the script or a checkpoint it cannot read fails the same way on every attempt.
# An attempt that started no rank (mp.spawn of 0 processes) starts none the next time either.
# A node without the job's script, working folder or python lacks it the next time too.
NOT_RETRYABLE = frozenset({FailureCategory.USER_CODE_ERROR, FailureCategory.CHECKPOINT_ERROR,
                           FailureCategory.NO_RANKS_STARTED, FailureCategory.NODE_SETUP_ERROR})
# the job spec's default restart.retry_on: the words as plain strings (what the spec holds)
DEFAULT_RETRY_ON = tuple(c.value for c in (
    FailureCategory.HANG, FailureCategory.NCCL_TIMEOUT, FailureCategory.NCCL_ERROR,
    FailureCategory.GLOO_TIMEOUT_OR_PEER_LOST, FailureCategory.RENDEZVOUS_FAILURE,
    FailureCategory.HARDWARE_FAULT, FailureCategory.PREEMPTION_OR_NODE_LOST,
    FailureCategory.CUDA_OOM, FailureCategory.KILLED_SIGKILL, FailureCategory.CRASHED_SIGNAL,
    FailureCategory.INJECTED_FAULT, FailureCategory.NONFINITE_LOSS, FailureCategory.LOSS_JUMP,
    FailureCategory.UNKNOWN,
))
# Failures of communication are most often the symptom of a peer that died first.
COMMUNICATION = frozenset({FailureCategory.NCCL_TIMEOUT, FailureCategory.NCCL_ERROR,
                           FailureCategory.GLOO_TIMEOUT_OR_PEER_LOST,
                           FailureCategory.RENDEZVOUS_FAILURE})
# A rank ended by a signal: SIGKILL (the kernel's OOM killer, a scheduler's limit, kill -9) and
# every other fatal signal but SIGTERM (a crash in native code: SIGSEGV, SIGABRT, SIGBUS...), which
# stays preemption_or_node_lost.
SIGNAL_ENDINGS = frozenset({FailureCategory.KILLED_SIGKILL, FailureCategory.CRASHED_SIGNAL})
# What fsdp-orch decides from what it sees itself (heartbeats, its own fault injection, the
# losses of an attempt against those before it), never from one log's signature: no public log
# shows them.
NOT_IN_PUBLIC_LOGS = frozenset({FailureCategory.INJECTED_FAULT, FailureCategory.NO_RANKS_STARTED,
                                FailureCategory.NODE_SETUP_ERROR,
                                FailureCategory.STRAGGLER_REPLACED,
                                FailureCategory.NONFINITE_LOSS, FailureCategory.LOSS_JUMP})
# The exit status a kind's attempt handle reports when a node stopped answering (an SSH host lost
# mid-run): outside the range of real exit statuses and signals.
NODE_LOST_EXIT = -1001
