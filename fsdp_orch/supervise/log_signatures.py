"""The log lines the failure classifier knows: root-cause signatures by category (strong ones,
then weak ones), the lines that only report a consequence of another failure, and the shapes of a
traceback's lines. Compiled patterns and one lookup; the order lines are read in, and what wins, is
:class:`fsdp_orch.supervise.diagnose.LineScanner`'s."""

from __future__ import annotations

import re

from fsdp_orch.vocab.categories import COMMUNICATION, FailureCategory


def _rule(category: str, *patterns: str) -> list[tuple[str, re.Pattern[str]]]:
    return [(category, re.compile(p)) for p in patterns]


# Strong signatures, most specific first (a line is given the first category that matches).
STRONG = [
    # A node's launch script says what it lacks (templates/_node_body.sh.j2), then exits 78.
    *_rule("node_setup_error", r"\[fsdp-orch\] node setup: "),
    # The process group's own watchdog is stuck (not a collective that timed out): a hang.
    *_rule("hang", r"watchdog got stuck for \d+ seconds", r"due to ProcessGroupNCCL watchdog hang"),
    *_rule("cuda_oom", r"CUDA out of memory", r"OutOfMemoryError", r"CUBLAS_STATUS_ALLOC_FAILED",
           r"cudaErrorMemoryAllocation", r"NCCL WARN Cuda failure 2 'out of memory'",
           r"HIP out of memory", r"CUDA error: out of memory", r"CUDA_ERROR_OUT_OF_MEMORY",
           r"failed to allocate .* from device: hipError_t\(1002\)"),
    *_rule("hardware_fault", r"\bXid\b", r"NVRM:", r"uncorrectable ECC error", r"ECC_UNCORRECTABLE",
           r"cudaErrorECCUncorrectable", r"fallen off the bus", r"illegal memory access",
           r"unspecified launch failure", r"GPU is lost", r"CUDA error: an illegal instruction",
           r"NVLink (?:error|fatal)", r"\bGPU \S+ has fallen\b", r"cudaErrorDevicesUnavailable",
           r"Machine check events logged", r"cuda runtime error \(39\)",
           r"Unable to determine the device handle for GPU", r"uncorrectable hardware error",
           r"hardware errors detected in", r"amdgpu: GPU reset begin",
           r"Uncorrectable Error\s*:\s*[1-9]"),
    *_rule("nccl_timeout", r"Watchdog caught collective operation timeout",
           r"Heartbeat monitor timed out", r"failure detected by watchdog at work sequence id",
           r"Timeout\(ms\)=\d+\) ran for \d+ milliseconds",
           r"NCCL (?:work|communicator).*timed? ?out",
           r"ProcessGroupNCCL.*Timeout at NCCL work", r"WorkNCCL::checkTimeout"),
    *_rule("nccl_error", r"NCCL error in:",
           r"\bnccl(?:Internal|System|Remote|UnhandledCuda|InvalidUsage|InvalidArgument)Error\b",
           r"NCCL error: ", r"DistBackendError: NCCL", r"NCCL communicator was aborted",
           r"ncclCommInitRank failed", r"NCCL Error \d+:", r"NCCL failure .*'unhandled"),
    *_rule("gloo_timeout_or_peer_lost", r"gloo/transport/tcp/\S+\] Timed out waiting",
           r"gloo/transport/tcp/\S+\] (?:Read|Write) error",
           r"gloo/transport/tcp/\S+\] Connection closed by peer",
           r"gloo.*Connection reset by peer", r"Application timeout caused pair closure",
           r"Gloo connectFullMesh failed", r"ProcessGroupGloo.*(?:[Tt]imeout|timed out)",
           r"\[enforce fail at \S*gloo", r"gloo/transport/\S+\]", r"gloo::IoException",
           r"monitoredBarrier", r"Timed out waiting \d+ms for (?:recv|send)"),
    *_rule("rendezvous_failure", r"RendezvousClosedError", r"RendezvousTimeoutError",
           r"RendezvousConnectionError", r"RendezvousError", r"DistStoreError",
           r"TCP client failed to connect",
           r"The client socket has timed out after \d+ms while trying to connect",
           r"Timed out after \d+ seconds waiting for clients",
           r"The server socket has failed to listen",
           r"failed to bind to", r"EADDRINUSE", r"[Aa]ddress already in use",
           r"Connection refused.*(?:TCPStore|c10d|rendezvous)",
           r"torch\.distributed\.elastic\.rendezvous.*(?:Error|failed)",
           r"store based barrier", r"c10d key-value store", r"store->get\(",
           r"TCPStore", r"\[c10d\] The client socket has failed to connect", r"_create_c10d_store",
           r"rendezvous_(?:iterator|handler)", r"EtcdKey\w*: .*torch/elastic",
           r"RuntimeError: Socket Timeout"),
    *_rule("preemption_or_node_lost", r"DUE TO PREEMPTION", r"DUE TO TIME LIMIT",
           r"DUE TO NODE FAIL", r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT",
           r"(?:srun|salloc|sbatch): error: Node failure",
           r"Received (?:15|SIGTERM) death signal",
           r"SignalException: Process \d+ got signal: (?:15|1)\b",
           r"NODE_FAIL", r"slurmstepd: error: \*\*\* JOB \S+ STEPD TERMINATED", r"[Pp]reempted",
           r"spot (?:instance|VM).*(?:interrupt|terminat|reclaim)", r"Maintenance event",
           r"actor is dead because its (?:node|owner) has died", r"node has crashed",
           r"has been marked dead because the detector has missed", r"\bEvicted\b",
           r"The node (?:was low on resource|had condition)", r"termination is imminent",
           r"due to a preemption", r"lame workers found", r"\bpreemptions=[1-9]"),
    *_rule("checkpoint_error", r"CheckpointException", r"PytorchStreamReader failed",
           r"failed finding central directory", r"Error\(s\) in loading state_dict",
           r"Missing key\(s\) in state_dict", r"Unexpected key\(s\) in state_dict",
           r"size mismatch for \S+: copying a param", r"fsdp-orch: checkpoint error",
           r"PytorchStreamWriter failed", r"SafetensorError", r"invalid load key",
           r"Missing key in checkpoint state_dict",
           r"from checkpoint, the shape in current model is",
           r"Can't find a valid checkpoint", r"RuntimeError: File \S+ cannot be opened",
           r"No space left on device"),
    *_rule("xla_error", r"client mesh master", r"Unable to initialize backend 'tpu'",
           r"TPU is already in use",
           r"libtpu", r"PJRT.*(?:[Ee]rror|failed)", r"torch_xla.*Error", r"XlaRuntimeError",
           r"RESOURCE_EXHAUSTED", r"[Rr]esource exhausted: .*(?:reserve|allocate|(?i:hbm))",
           r"tensorflow::tpu::", r"tensorflow/core/tpu/\S+\].*(?:failed|[Ee]rror)",
           r"Failed to connect to remote server at address: grpc://",
           r"compiler/xla/", r"xla_client/", r"\bXRT(?:Compile|Execute)\b",
           r"Exception in device=TPU",
           r"TPU system has not been initialized", r"tpu_driver", r"/job:(?:c_)?tpu_worker",
           r"torch_xla/csrc/", r"[Uu]nsupported XLA type", r"backend XLA", r"TPU_SYSTEM",
           r"TPU initialization failed", r"Bad StatusOr access", r"mesh_service\.cc", r"MeshClient",
           r"Do not use the XLA device", r"No PjRt ?[Pp]lugin registered",
           # XLA's own fatal log line (an unknown XLA_FLAGS flag, a failed CHECK) before it aborts.
           r": F +(?:\d+ +)?(?:external/(?:local_)?xla/)?(?:xla|tsl)/\S+:\d+\]",
           # A custom call XLA's compiler finds no kernel for on the device's platform.
           r"No registered implementation for (?:\w+ )?custom[- ]call",
           r"No FFI handler registered for"),
    # A device-side assert is an indexing bug in the program (labels out of range), not the GPU.
    *_rule("user_code_error", r"device-side assert triggered", r"Assertion `.*` failed"),
]

WEAK = [
    *_rule("nccl_error", r"NCCL WARN", r"NET/IB : Got completion .* with error"),
    *_rule("gloo_timeout_or_peer_lost", r"Connection reset by peer", r"Broken pipe"),
    *_rule("preemption_or_node_lost", r"got signal: 15", r"Terminated\s*$"),
]

# A SIGKILL reported after one of these is its root cause (a peer killed, the survivors then lost
# it), except after NCCL's watchdog timeout: that line comes a whole process-group timeout after a
# peer stopped, so a peer's SIGKILL on the node would have been reported first, and one reported
# later is the timed-out rank's own teardown (seen on an H200: the supervisor's stop after the
# timeout line).
KILL_EXPLAINS = COMMUNICATION - {FailureCategory.NCCL_TIMEOUT}

# Consequences of a failure elsewhere: never the evidence. (torchrun's "failed (exitcode: N)" for a
# rank that exited with a status; one killed by a signal, "exitcode: -9", is a signal's line.)
CONSEQUENCE = re.compile(
    r"closing signal SIGTERM|ChildFailedError|Some NCCL operations have failed or timed out|"
    r"To avoid data inconsistency|failed \(exitcode: ?\d|"
    r"torch\.distributed\.elastic\.multiprocessing\.errors|"
    r"Stack trace of the failed collective not found|preparing to dump debug info|"
    r"CUDA kernel errors might be asynchronously reported|For debugging consider passing|"
    r"Compile with `TORCH_USE_CUDA_DSA`|subprocess\.CalledProcessError|"
    r"(?:[\w.]+\.)?ProcessExitedException: process \d+ terminated with exit code -?\d+")

# What is put before a process's own line: torchrun's "[default0]:", Ray's "(Worker pid=N)", a
# "name: " before a traceback or an exception.
LOG_PREFIX = re.compile(r"^(?:\[(?:default|rank)\d+\]:\s?|\[stderr\]\s?|\[stdout\]\s?"
                        r"|\(\w+ pid=\d+(?:, ip=[\d.]+)?\) ?"
                        r"|\S+:\s(?=Traceback|\w+Error))")
TRACEBACK = "Traceback (most recent call last):"
# The last line of a traceback: "KeyError: 'x'", "pkg.mod.MyError", "MyThing: message". A bare
# "Word:" (torchrun's "Failures:") is not one.
ORDINARY_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.[A-Za-z_]\w*(?::|$)"
    r"|[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Iteration|Warning)(?::|$)"
    r"|[A-Za-z_]\w*: \S)")
# An exception that only carries another: mp.spawn's ProcessRaisedException (its message is the
# child's traceback), or any exception line whose message starts on the next line (older torch's
# "Exception:" before "-- Process 1 terminated with the following error:").
WRAPPER = re.compile(r"^(?:[\w.]+\.)?ProcessRaisedException\b|"
                     r"^(?:[A-Za-z_][\w.]*\.[A-Za-z_]\w*|[A-Za-z_]\w*(?:Error|Exception)):\s*$")

FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>\S+))?')
# A traceback through checkpoint I/O ends in a checkpoint error, whatever the exception's type.
CHECKPOINT_IO = re.compile(
    r"torch/distributed/(?:_shard/)?checkpoint/|torch/serialization\.py|safetensors|"
    r"\bcheckpoint(?:_utils|ing)?\.py|"
    r"\b(?:load|save)_(?:checkpoint|state_dict|sharded_optimizer_state_dict)\b|"
    r"_load_from_state_dict|\bdcp\.(?:load|save)\b|torch\.load\(|load_state_dict\(|"
    r"resume_from_checkpoint|_load_from_checkpoint|state_dict_type")
# An exception raised inside a library the training runs on is that library's failure, whatever
# its type: torch_xla refusing a mesh, a partition spec or a PJRT device (the frame it was raised
# in).
RAISED_IN = [(re.compile(r"(?:^|[/\\])torch_xla[/\\]"), FailureCategory.XLA_ERROR)]
# An exception line of Python's own error types, also where the excerpt lost its "Traceback"
# header.
BUILTIN_EXCEPTION = re.compile(
    r"^(?:KeyError|ValueError|TypeError|AttributeError|IndexError|NameError|FileNotFoundError|"
    r"ModuleNotFoundError|ImportError|AssertionError|NotImplementedError|ZeroDivisionError|"
    r"UnboundLocalError)(?::|$)")
# A stack dump (py-spy, gdb, faulthandler) is taken of a process that stopped moving.
STACK_DUMP = re.compile(r"^Thread \d+ \((?:idle|active)\)|"
                        r"^Thread 0x[0-9a-f]+ .*\(most recent call first\):|"
                        r"^#\d+\s+0x[0-9a-f]+ in |^Process \d+: .*python")
# After a crash, the stacks the crash handler prints are not a hang's.
CRASH = re.compile(r"Fatal Python error|Segmentation fault|core dumped|SIGSEGV|SIGABRT")

# A process's last words at start-up, when it refuses to run at all: argparse's (or click's) error
# after the usage it prints ("usage: train.py [-h] ..." then "train.py: error: unrecognized
# arguments: --stpes 5", exit 2), the interpreter's for a script it cannot open ("python: can't
# open file '/x/train.py': [Errno 2] No such file or directory", exit 2) or a module it cannot find
# ("python: No module named pkg", "Error while finding module specification", exit 1). Each with
# the exit status that process ends with: a line of these in a log whose rank exited otherwise
# (a subprocess of a healthy job printed it) is not the cause. Never a cause in a live log:
# LineScanner keeps it apart (``startup``) for the exit to decide on.
USAGE = re.compile(r"^usage: \S", re.IGNORECASE)
USAGE_ERROR = re.compile(r"^(?:[^\s:][^:]{0,80}: error: |Error: )\S")
USAGE_SPAN = 40  # lines between the usage and its error (a long usage; other ranks' lines)
USAGE_EXIT = 2  # argparse's parser.error and click's UsageError
STARTUP = [
    (re.compile(r"^\S*python[\d.]*: can't open file .*\[Errno \d+\]"), 2),
    (re.compile(r"^\S*python[\d.]*: (?:No module named |Error while finding module specification)"),
     1),
]

# What fsdp-orch's own fault injection prints before it ends a rank (FSDP_ORCH_FAULT: crash, kill,
# checkpoint_crash); a hang or a skipped collective it injects is found the way a real one is.
INJECTED = re.compile(r"\[fsdp-orch fault\] rank \d+: injected (?:crash|SIGKILL)\b")


def match_rule(rules: list[tuple[str, re.Pattern[str]]], line: str) -> str | None:
    """The category of the first rule whose pattern is found in ``line``, else None."""
    for category, pattern in rules:
        if pattern.search(line):
            return category
    return None
