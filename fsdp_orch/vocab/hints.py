"""What a user can do about each kind of failure: one short suggestion per category, sharpened by
the line that decided it where that line says more. Pure, stdlib only."""

from __future__ import annotations

import re

from fsdp_orch.vocab.categories import FailureCategory

HINTS = {
    "hang": "a rank stopped making progress: the stacks show where; "
            "look for a collective only some ranks reach (a rank-dependent branch, "
            "an uneven last batch) or a deadlocked data loader",
    "nccl_timeout": "a collective timed out: one rank was slower or stuck (see the stacks and the "
                    "flight recorder dumps); check for a rank-dependent code path, "
                    "then the network (NCCL_DEBUG=INFO)",
    "nccl_error": "NCCL failed: run with NCCL_DEBUG=INFO to see the transport; "
                  "check the interconnect (NCCL_SOCKET_IFNAME, InfiniBand links) and that every "
                  "node has the same NCCL version",
    "gloo_timeout_or_peer_lost": "a peer went away or stalled: look for the rank that failed first "
                                 "(its own error is the cause); "
                                 "raise the timeout only if it was merely slow",
    "rendezvous_failure": "the ranks could not meet: check that the rendezvous endpoint "
                          "(rdzv_endpoint, MASTER_ADDR:MASTER_PORT) is reachable from every node, "
                          "the port is free and no firewall blocks it",
    "cuda_oom": "out of GPU memory: reduce the per-device batch size or sequence length, "
                "or turn on activation_checkpointing or offload_params in the fsdp: options",
    "hardware_fault": "a GPU or node fault: drain the node (check nvidia-smi and the kernel log "
                      "for Xid or ECC errors) and resume elsewhere from the latest checkpoint",
    "preemption_or_node_lost": "the scheduler or the cloud took the machines: "
                               "the job resumes from the latest checkpoint; checkpoint more "
                               "often if too much work is lost",
    "user_code_error": "the script itself failed: "
                       "fix the error in the traceback (retrying would fail the same way)",
    "checkpoint_error": "a checkpoint could not be saved or loaded: check that it is complete and "
                        "was written by the same model and sharding, and that the disk has space",
    "xla_error": "the TPU runtime failed: check that no other process holds the TPU, "
                 "that torch_xla matches the TPU runtime version, and the HBM use of the program",
    "nonfinite_loss": "the loss or grad norm went NaN/inf: right after a resume the checkpoint is "
                      "suspect (kept in .fsdp-orch-suspect/ in the checkpoint folder) and the job "
                      "resumes from the one before; mid-run, lower the learning rate, clip "
                      "gradients or look at the batch of that step",
    "loss_jump": "the first losses after a resume were far from the loss logged when its "
                 "checkpoint was saved: it may hold other weights (another run's, a partial "
                 "load); it is kept in .fsdp-orch-suspect/ and the job resumes from the one before",
    "node_setup_error": "a node did not have what the job needs there (its working folder, script "
                        "or python, named in the evidence: put it on every node), or refused its "
                        "checkpoint folder (not yours, or others can write it: use a folder of "
                        "yours); then submit again",
    "straggler_replaced": "a rank its peers kept waiting for was left out with its node at a "
                          "checkpoint (watch.stragglers: replace); the job goes on on a spare: "
                          "look at that node's health (thermal throttling, a slow link, a noisy "
                          "neighbour) before it is used again",
    "no_ranks_started": "the program exited without starting a single rank: check how many "
                        "processes it starts (mp.spawn(nprocs=torch.cuda.device_count()) starts "
                        "none on a machine without a GPU; use WORLD_SIZE or procs_per_node); a job "
                        "that is not meant to start torch ranks says watch.expect_ranks: false",
    "killed_sigkill": "the rank was killed with SIGKILL, most often by the kernel's OOM killer "
                      "(host memory, not GPU memory) or by the scheduler (a memory or time limit): "
                      "look at `dmesg -T | grep -i -e oom -e killed` or `journalctl -k` on the "
                      "rank's node, and under SLURM at `sacct -j <id> "
                      "--format=JobID,State,ExitCode,MaxRSS`; use less host memory (DataLoader "
                      "workers, pinned or offloaded tensors) or ask for more",
    "crashed_signal": "the rank died of a signal (named in the evidence), "
                      "a crash in native code: run with PYTHONFAULTHANDLER=1 to get the "
                      "Python stack at the crash, and check that torch, CUDA/NCCL and "
                      "compiled extensions come from matching builds",
    "injected_fault": "a fault injected on purpose (env FSDP_ORCH_FAULT): "
                      "the restart shows how the job recovers; remove the variable for a real run",
    "unknown": "no known cause in the logs: read the last lines of the first rank that failed "
               "(fsdp-orch logs JOB)",
}

# Where the deciding line names a more precise cause than its category: (category or None for any,
# pattern, hint).
_SHARPER = [
    (None, re.compile(r"[Aa]ddress already in use|EADDRINUSE|failed to bind"),
     "the rendezvous port is taken: another job or a leftover process holds it; pick another port "
     "or stop that process"),
    (None, re.compile(r"No space left on device"),
     "the disk is full: free space or point checkpoint.dir at a larger filesystem"),
    (None, re.compile(r"TPU is already in use|already in use by"),
     "another process holds the TPU: stop it (sudo lsof -w /dev/accel*) before starting the job"),
    (None, re.compile(r"size mismatch for|Missing key\(s\)|Unexpected key\(s\)"),
     "the checkpoint belongs to a different model or sharding: "
     "load it with the model that wrote it"),
    ("killed_sigkill", re.compile(r"(?i)out of memory: kill|oom[-_]kill|oomkilled|"
                                  r"cgroup out of memory|out-of-memory handler"),
     "the kernel's OOM killer ended the rank: the node ran out of host memory (not GPU memory); "
     "see `dmesg -T | grep -i -e oom -e killed` or `journalctl -k` on the node and, under SLURM, "
     "`sacct -j <id> --format=JobID,State,ExitCode,MaxRSS`; use fewer DataLoader workers, "
     "less pinned or offloaded memory, or ask the scheduler for more memory"),
    ("crashed_signal", re.compile(r"SIGBUS|[Bb]us error"),
     "SIGBUS: most often /dev/shm is too small for the DataLoader workers' shared tensors "
     "(containers default to 64 MB): raise it (docker --shm-size, a larger /dev/shm mount) or use "
     "fewer num_workers; else a file mapped in memory was truncated under the process"),
    ("crashed_signal", re.compile(r"SIGABRT|Aborted"),
     "SIGABRT: the process aborted itself; the lines just before it say why (\"terminate "
     "called after throwing\", a failed assertion, NCCL's watchdog); "
     "run with PYTHONFAULTHANDLER=1 for the Python stack"),
    ("crashed_signal", re.compile(r"SIGHUP|Hangup"),
     "SIGHUP: the terminal or SSH session that started the process went away; "
     "start it under nohup, tmux or the scheduler"),
    ("crashed_signal", re.compile(r"SIGINT"),
     "SIGINT: the process was interrupted (Ctrl-C or kill -INT) by a person or a script"),
    ("xla_error", re.compile(r"[Uu]nsupported nprocs"),
     "under PJRT, xmp.spawn starts one process per device: leave nprocs unset (or 1) and limit the "
     "devices with the environment (CPU_NUM_DEVICES, TPU_VISIBLE_CHIPS) instead"),
    ("xla_error", re.compile(r"[Mm]esh size|global number of devices|[Pp]artition spec|"
                             r"not defined in the given mesh"),
     "the SPMD mesh or a partition spec does not fit: the mesh's shape must multiply to the number "
     "of devices (xr.global_runtime_device_count()), and a partition spec needs one entry per "
     "tensor dimension, naming only the mesh's axes"),
    ("xla_error", re.compile(r"PJRT_DEVICE|PjRt ?Plugin|libtpu|XLA_FLAGS"),
     "the XLA runtime could not start with this environment: check that PJRT_DEVICE names a device "
     "the host has (TPU needs libtpu, installed with torch_xla[tpu]) and that every flag in "
     "XLA_FLAGS exists in this torch_xla's XLA"),
    ("xla_error", re.compile(r"custom[- ]call|FFI handler|incompatible shapes"),
     "XLA could not compile the program's graph: the error names the op; a custom kernel must be "
     "registered for the device's platform, and shapes must agree before the graph is built"),
    # The user's mistakes at start-up (issue 62): each names what to change before submitting again.
    ("user_code_error", re.compile(r"^(?:[^\s:][^:]{0,80}: error: |Error: )"),
     "the script refused its arguments (the error names the one it rejects): fix args: in the job "
     "file, or the --set args=[...] given to submit (`python SCRIPT --help` lists what it takes); "
     "retrying would fail the same way"),
    ("user_code_error", re.compile(r"PermissionError|Permission denied|Errno 13\b"),
     "the job may not read, write or run a path named in the error on the node: check its owner "
     "and mode (ls -l), the account the job runs as, and that a program it runs is executable "
     "(chmod +x)"),
    ("user_code_error", re.compile(r"ModuleNotFoundError|ImportError|No module named|"
                                   r"finding module specification"),
     "a module the script imports is not installed in the python the job runs on the node (the "
     "cluster profile's python:): install it there (python -m pip install ...) or fix the import; "
     "if only one node's ranks say so, that node's environment differs from the others': install "
     "it there too"),
    ("user_code_error", re.compile(r"FileNotFoundError|No such file or directory|"
                                   r"can't open file"),
     "a file or folder the script opens is not there on the node: a relative path starts in the "
     "job's working folder (workdir:), and data must be on every node (a shared filesystem, or a "
     "copy on each); fix the path in args: or the script"),
    ("crashed_signal", re.compile(r"SIGXCPU"),
     "SIGXCPU: the process used up its CPU-time limit (ulimit -t or the "
     "scheduler's); raise the limit"),
]


_COMMAND_FOR_A_JOB = re.compile(r"\b(fsdp-orch [a-z]+) JOB(?:_ID)?\b")


def for_job(text: str, job_id: str) -> str:
    """``text`` with the placeholder of a command it suggests (``fsdp-orch logs JOB``, ``fsdp-orch
    status JOB_ID``) made the job's own id, for a reader who has that job in front of them."""
    return _COMMAND_FOR_A_JOB.sub(lambda m: f"{m[1]} {job_id}", text)


def hint_for(category: str, evidence: str | None = None) -> str:
    if evidence:
        for only, pattern, hint in _SHARPER:
            if (only is None or only == category) and pattern.search(evidence):
                return hint
    return HINTS.get(category, HINTS[FailureCategory.UNKNOWN])
