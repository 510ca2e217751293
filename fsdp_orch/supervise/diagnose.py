"""Failure classification: a pure function of log text (and exit codes) -> category, retryable, evidence.

Signatures are checked line by line in the order the lines were written; the first *root cause*
wins. Lines that only report the consequence of another failure (torchrun's "Sending process N closing
signal SIGTERM", ChildFailedError, NCCL's "taking the entire process down") never win over a cause.
Weak signatures (a bare "NCCL WARN", "Broken pipe") count only when no strong one is found.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from fsdp_orch.vocab.categories import FAILURE_CATEGORIES, NODE_LOST_EXIT, NOT_RETRYABLE
from fsdp_orch.vocab.hints import hint_for

CATEGORIES = FAILURE_CATEGORIES


@dataclass(frozen=True)
class Diagnosis:
    category: str
    retryable: bool
    evidence: str | None  # the line that decided it
    line: int | None = None  # 1-based line number in the text it came from

    @property
    def hint(self) -> str:
        """What the user can do about it."""
        return hint_for(self.category, self.evidence)

    def to_json(self) -> dict[str, object]:
        return {"category": self.category, "retryable": self.retryable, "evidence": self.evidence,
                "line": self.line, "hint": self.hint}


def _rule(category: str, *patterns: str) -> list[tuple[str, re.Pattern[str]]]:
    return [(category, re.compile(p)) for p in patterns]


# Strong signatures, most specific first (a line is given the first category that matches).
STRONG = [
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
           r"Timeout\(ms\)=\d+\) ran for \d+ milliseconds", r"NCCL (?:work|communicator).*timed? ?out",
           r"ProcessGroupNCCL.*Timeout at NCCL work", r"WorkNCCL::checkTimeout"),
    *_rule("nccl_error", r"NCCL error in:", r"\bnccl(?:Internal|System|Remote|UnhandledCuda|InvalidUsage|InvalidArgument)Error\b",
           r"NCCL error: ", r"DistBackendError: NCCL", r"NCCL communicator was aborted",
           r"ncclCommInitRank failed", r"NCCL Error \d+:", r"NCCL failure .*'unhandled"),
    *_rule("gloo_timeout_or_peer_lost", r"gloo/transport/tcp/\S+\] Timed out waiting",
           r"gloo/transport/tcp/\S+\] (?:Read|Write) error", r"gloo/transport/tcp/\S+\] Connection closed by peer",
           r"gloo.*Connection reset by peer", r"Application timeout caused pair closure",
           r"Gloo connectFullMesh failed", r"ProcessGroupGloo.*(?:[Tt]imeout|timed out)",
           r"\[enforce fail at \S*gloo", r"gloo/transport/\S+\]", r"gloo::IoException",
           r"monitoredBarrier", r"Timed out waiting \d+ms for (?:recv|send)"),
    *_rule("rendezvous_failure", r"RendezvousClosedError", r"RendezvousTimeoutError",
           r"RendezvousConnectionError", r"RendezvousError", r"DistStoreError",
           r"TCP client failed to connect", r"The client socket has timed out after \d+ms while trying to connect",
           r"Timed out after \d+ seconds waiting for clients", r"The server socket has failed to listen",
           r"failed to bind to", r"EADDRINUSE", r"[Aa]ddress already in use",
           r"Connection refused.*(?:TCPStore|c10d|rendezvous)", r"torch\.distributed\.elastic\.rendezvous"
           r".*(?:Error|failed)", r"store based barrier", r"c10d key-value store", r"store->get\(",
           r"TCPStore", r"\[c10d\] The client socket has failed to connect", r"_create_c10d_store",
           r"rendezvous_(?:iterator|handler)", r"EtcdKey\w*: .*torch/elastic", r"RuntimeError: Socket Timeout"),
    *_rule("preemption_or_node_lost", r"DUE TO PREEMPTION", r"DUE TO TIME LIMIT", r"DUE TO NODE FAIL",
           r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT", r"(?:srun|salloc|sbatch): error: Node failure",
           r"Received (?:15|SIGTERM) death signal", r"SignalException: Process \d+ got signal: (?:15|1)\b",
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
           r"Missing key in checkpoint state_dict", r"from checkpoint, the shape in current model is",
           r"Can't find a valid checkpoint", r"RuntimeError: File \S+ cannot be opened",
           r"No space left on device"),
    *_rule("xla_error", r"client mesh master", r"Unable to initialize backend 'tpu'", r"TPU is already in use",
           r"libtpu", r"PJRT.*(?:[Ee]rror|failed)", r"torch_xla.*Error", r"XlaRuntimeError",
           r"RESOURCE_EXHAUSTED", r"[Rr]esource exhausted: .*(?:reserve|allocate|(?i:hbm))",
           r"tensorflow::tpu::", r"tensorflow/core/tpu/\S+\].*(?:failed|[Ee]rror)",
           r"Failed to connect to remote server at address: grpc://",
           r"compiler/xla/", r"xla_client/", r"\bXRT(?:Compile|Execute)\b", r"Exception in device=TPU",
           r"TPU system has not been initialized", r"tpu_driver", r"/job:(?:c_)?tpu_worker",
           r"torch_xla/csrc/", r"[Uu]nsupported XLA type", r"backend XLA", r"TPU_SYSTEM",
           r"TPU initialization failed", r"Bad StatusOr access", r"mesh_service\.cc", r"MeshClient",
           r"Do not use the XLA device"),
    # A device-side assert is an indexing bug in the program (labels out of range), not the GPU.
    *_rule("user_code_error", r"device-side assert triggered", r"Assertion `.*` failed"),
]

WEAK = [
    *_rule("nccl_error", r"NCCL WARN", r"NET/IB : Got completion .* with error"),
    *_rule("gloo_timeout_or_peer_lost", r"Connection reset by peer", r"Broken pipe"),
    *_rule("preemption_or_node_lost", r"got signal: 15", r"Terminated\s*$"),
]

# Consequences of a failure elsewhere: never the evidence.
CONSEQUENCE = re.compile(
    r"closing signal SIGTERM|ChildFailedError|Some NCCL operations have failed or timed out|"
    r"To avoid data inconsistency|failed \(exitcode|torch\.distributed\.elastic\.multiprocessing\.errors|"
    r"Stack trace of the failed collective not found|preparing to dump debug info|"
    r"CUDA kernel errors might be asynchronously reported|For debugging consider passing|"
    r"Compile with `TORCH_USE_CUDA_DSA`|subprocess\.CalledProcessError")

_PREFIX = re.compile(r"^(?:\[(?:default|rank)\d+\]:\s?|\[stderr\]\s?|\[stdout\]\s?|\(\w+ pid=\d+(?:, ip=[\d.]+)?\) ?"
                     r"|\S+:\s(?=Traceback|\w+Error))")
_TRACEBACK = "Traceback (most recent call last):"
# The last line of a traceback: "KeyError: 'x'", "pkg.mod.MyError", "MyThing: message". A bare
# "Word:" (torchrun's "Failures:") is not one.
_ORDINARY_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.[A-Za-z_]\w*(?::|$)"
    r"|[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Iteration|Warning)(?::|$)"
    r"|[A-Za-z_]\w*: \S)")


_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')
# A traceback through checkpoint I/O ends in a checkpoint error, whatever the exception's type.
_CHECKPOINT_IO = re.compile(r"torch/distributed/(?:_shard/)?checkpoint/|torch/serialization\.py|safetensors|"
                            r"\bcheckpoint(?:_utils|ing)?\.py|"
                            r"\b(?:load|save)_(?:checkpoint|state_dict|sharded_optimizer_state_dict)\b|"
                            r"_load_from_state_dict|\bdcp\.(?:load|save)\b|torch\.load\(|load_state_dict\(|"
                            r"resume_from_checkpoint|_load_from_checkpoint|state_dict_type")
# An exception line of Python's own error types, also where the excerpt lost its "Traceback" header.
_BUILTIN_EXCEPTION = re.compile(
    r"^(?:KeyError|ValueError|TypeError|AttributeError|IndexError|NameError|FileNotFoundError|"
    r"ModuleNotFoundError|ImportError|AssertionError|NotImplementedError|ZeroDivisionError|"
    r"UnboundLocalError)(?::|$)")
# A stack dump (py-spy, gdb, faulthandler) is taken of a process that stopped moving.
_STACK_DUMP = re.compile(r"^Thread \d+ \((?:idle|active)\)|^Thread 0x[0-9a-f]+ .*\(most recent call first\):|"
                         r"^#\d+\s+0x[0-9a-f]+ in |^Process \d+: .*python")
# After a crash, the stacks the crash handler prints are not a hang's.
_CRASH = re.compile(r"Fatal Python error|Segmentation fault|core dumped|SIGSEGV|SIGABRT")


def _match(rules: list[tuple[str, re.Pattern[str]]], line: str) -> str | None:
    for category, pattern in rules:
        if pattern.search(line):
            return category
    return None


class LineScanner:
    """Feeds lines one at a time (a live log); remembers the first root cause and the first weak sign.

    One scanner per stream: a Python traceback is followed line by line to its exception line.
    """

    def __init__(self) -> None:
        self.first: Diagnosis | None = None
        self.weak: Diagnosis | None = None
        self._in_traceback = False
        self._through_checkpoint_io = False
        self._checkpoint_frame: tuple[str, int] | None = None
        self._crashed = False
        self._count = 0

    def feed(self, raw: str) -> Diagnosis | None:
        """Returns the root cause as soon as one is known (and keeps returning it)."""
        self._count += 1
        if self.first is not None:
            return self.first
        body = _PREFIX.sub("", raw.rstrip("\r\n"))
        line = body.strip()
        if not line:
            return None
        frame = _FRAME.match(body)
        if _TRACEBACK in line or line.startswith("Exception in thread") or frame:
            if not self._in_traceback:
                self._through_checkpoint_io = False
            self._in_traceback = True
            self._note_checkpoint_io(line)
            rest = body[frame.end():] if frame else ""
            category = _match(STRONG, rest) if len(rest) > 80 else None  # a log collapsed onto one line
            if category is not None:
                self.first = Diagnosis(category, category not in NOT_RETRYABLE, line, self._count)
            return self.first
        if self._in_traceback and body[:1].isspace():
            self._note_checkpoint_io(line)
        if _CRASH.search(line):
            self._crashed = True
        evidence = line
        # What only reports another failure is cut out; what is left of the line may still be a cause.
        line = CONSEQUENCE.sub(" ", line).strip()
        if len(line) < 3:
            if not body[:1].isspace():
                self._in_traceback = False  # e.g. torchrun's own traceback ends in ChildFailedError
            return None
        category = _match(STRONG, line)
        if category is not None:
            self.first = Diagnosis(category, category not in NOT_RETRYABLE, evidence, self._count)
            return self.first
        if self._in_traceback and not body[:1].isspace() and not line.startswith(("File ", "^", "~")):
            if _ORDINARY_EXCEPTION.match(line) and not line.startswith(("During handling", "The above")):
                self._in_traceback = False
                if line.startswith("KeyboardInterrupt"):  # someone stopped a process that sat still
                    self.weak = self.weak or Diagnosis("hang", True, evidence, self._count)
                    return None
                category = "checkpoint_error" if self._through_checkpoint_io else "user_code_error"
                self.first = Diagnosis(category, False, evidence, self._count)
                return self.first
        if self.weak is None:
            weak = _match(WEAK, line)
            if weak is None and _BUILTIN_EXCEPTION.match(line) and not body[:1].isspace():
                weak = "user_code_error"
            if weak is None and not self._crashed and _STACK_DUMP.match(line):
                weak = "hang"
            if weak is not None:
                self.weak = Diagnosis(weak, weak not in NOT_RETRYABLE, evidence, self._count)
        return None

    def _note_checkpoint_io(self, line: str) -> None:
        if _CHECKPOINT_IO.search(line):
            self._through_checkpoint_io = True
            self._checkpoint_frame = self._checkpoint_frame or (line, self._count)

    def result(self) -> Diagnosis | None:
        """The root cause, else a traceback through checkpoint I/O cut off before its exception line,
        else the first weak sign."""
        if self.first is None and self._in_traceback and self._checkpoint_frame is not None:
            line, number = self._checkpoint_frame
            return Diagnosis("checkpoint_error", False, line, number)
        return self.first or self.weak


def diagnose_text(text: str) -> Diagnosis:
    """The category of the first root cause in ``text``; ``unknown`` when nothing is recognised."""
    scanner = LineScanner()
    for line in text.splitlines():
        if scanner.feed(line) is not None:
            break
    return scanner.result() or Diagnosis("unknown", True, None, None)


def diagnose_lines(lines: Iterable[str]) -> Diagnosis:
    return diagnose_text("\n".join(lines))


def diagnose_exit(code: int | None) -> Diagnosis:
    """When the logs say nothing: what the exit status alone tells (negative = killed by a signal)."""
    if code is None:
        return Diagnosis("preemption_or_node_lost", True, "the attempt's processes disappeared", None)
    if code == NODE_LOST_EXIT:
        return Diagnosis("preemption_or_node_lost", True, "a node stopped answering (its host is named in "
                                                          "the supervisor's log)", None)
    if code in (-9, 137):
        return Diagnosis("unknown", True, f"killed by SIGKILL (exit {code}): the kernel OOM killer or an "
                                          "external kill", None)
    if code in (-15, 143):
        return Diagnosis("preemption_or_node_lost", True, f"terminated by SIGTERM (exit {code})", None)
    if code < 0 or code > 128:
        signum = -code if code < 0 else code - 128
        return Diagnosis("unknown", True, f"killed by signal {signum} (exit {code})", None)
    return Diagnosis("unknown", True, f"exited with code {code}", None)


_ROOT_CAUSE = "Root Cause (first observed failure):"
_SUMMARY_FIELD = re.compile(r"^\s*(rank|exitcode)\s*:\s*(-?\d+)(?:\s*\(local_rank:\s*(\d+)\))?")


def torchrun_root_cause(lines: Iterable[str]) -> tuple[int, int, int] | None:
    """(global rank, local rank, exit code) of torchrun's "Root Cause (first observed failure)" block."""
    rank: int | None = None
    local = 0
    inside = False
    for raw in lines:
        line = raw.rstrip()
        if _ROOT_CAUSE in line:
            inside, rank = True, None
            continue
        if not inside:
            continue
        m = _SUMMARY_FIELD.match(line)
        if m and m.group(1) == "rank":
            rank = int(m.group(2))
            local = int(m.group(3)) if m.group(3) is not None else rank
        elif m and rank is not None:
            return rank, local, int(m.group(2))
        elif line.startswith("==="):
            inside = False
    return None
