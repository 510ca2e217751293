"""What a user can do about each kind of failure: one short suggestion per category, sharpened by
the line that decided it where that line says more. Pure, stdlib only."""

from __future__ import annotations

import re

HINTS = {
    "hang": "a rank stopped making progress: the stacks show where; look for a collective only some "
            "ranks reach (a rank-dependent branch, an uneven last batch) or a deadlocked data loader",
    "nccl_timeout": "a collective timed out: one rank was slower or stuck (see the stacks and the flight "
                    "recorder dumps); check for a rank-dependent code path, then the network (NCCL_DEBUG=INFO)",
    "nccl_error": "NCCL failed: run with NCCL_DEBUG=INFO to see the transport; check the interconnect "
                  "(NCCL_SOCKET_IFNAME, InfiniBand links) and that every node has the same NCCL version",
    "gloo_timeout_or_peer_lost": "a peer went away or stalled: look for the rank that failed first "
                                 "(its own error is the cause); raise the timeout only if it was merely slow",
    "rendezvous_failure": "the ranks could not meet: check that the rendezvous endpoint (rdzv_endpoint, "
                          "MASTER_ADDR:MASTER_PORT) is reachable from every node, the port is free and "
                          "no firewall blocks it",
    "cuda_oom": "out of GPU memory: reduce the per-device batch size or sequence length, or turn on "
                "activation_checkpointing or offload_params in the fsdp: options",
    "hardware_fault": "a GPU or node fault: drain the node (check nvidia-smi and the kernel log for Xid "
                      "or ECC errors) and resume elsewhere from the latest checkpoint",
    "preemption_or_node_lost": "the scheduler or the cloud took the machines: the job resumes from the "
                               "latest checkpoint; checkpoint more often if too much work is lost",
    "user_code_error": "the script itself failed: fix the error in the traceback (retrying would fail "
                       "the same way)",
    "checkpoint_error": "a checkpoint could not be saved or loaded: check that it is complete and was "
                        "written by the same model and sharding, and that the disk has space",
    "xla_error": "the TPU runtime failed: check that no other process holds the TPU, that torch_xla "
                 "matches the TPU runtime version, and the HBM use of the program",
    "unknown": "no known cause in the logs: read the last lines of the first rank that failed "
               "(fsdp-orch logs JOB)",
}

# Where the deciding line names a more precise cause than its category.
_SHARPER = [
    (re.compile(r"[Aa]ddress already in use|EADDRINUSE|failed to bind"),
     "the rendezvous port is taken: another job or a leftover process holds it; pick another port "
     "or stop that process"),
    (re.compile(r"No space left on device"), "the disk is full: free space or point checkpoint.dir "
                                             "at a larger filesystem"),
    (re.compile(r"TPU is already in use|already in use by"),
     "another process holds the TPU: stop it (sudo lsof -w /dev/accel*) before starting the job"),
    (re.compile(r"size mismatch for|Missing key\(s\)|Unexpected key\(s\)"),
     "the checkpoint belongs to a different model or sharding: load it with the model that wrote it"),
]


def hint_for(category: str, evidence: str | None = None) -> str:
    if evidence:
        for pattern, hint in _SHARPER:
            if pattern.search(evidence):
                return hint
    return HINTS.get(category, HINTS["unknown"])
