"""Failure classification: a pure function of log text (and exit codes) -> category, retryable, evidence.

Signatures are checked line by line in the order the lines were written; the first *root cause*
wins. Lines that only report the consequence of another failure (torchrun's "Sending process N closing
signal SIGTERM", ChildFailedError, NCCL's "taking the entire process down") never win over a cause.
An exception that only carries another (mp.spawn's ProcessRaisedException, an exception whose message
starts on the next line) is never the evidence when a real one follows: the innermost exception line
is, with where it was raised; one raised in torch_xla's own frames is ``xla_error``. A rank ended
by a signal is named by it (``killed_sigkill``, ``crashed_signal``); a fault fsdp-orch injected on
purpose is ``injected_fault``.
Weak signatures (a bare "NCCL WARN", "Broken pipe") count only when no strong one is found.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from fsdp_orch.observe.stacks import display_path, is_library_file
from fsdp_orch.supervise.signals import SIGNALS, signal_category, signal_named
from fsdp_orch.vocab.categories import (
    COMMUNICATION,
    FAILURE_CATEGORIES,
    NODE_LOST_EXIT,
    NOT_RETRYABLE,
    SIGNAL_ENDINGS,
    FailureCategory,
)
from fsdp_orch.vocab.hints import hint_for

CATEGORIES = FAILURE_CATEGORIES


@dataclass(frozen=True)
class Diagnosis:
    category: FailureCategory  # given as its string, made the word (an unknown one is a ValueError)
    retryable: bool
    evidence: str | None  # the line that decided it
    line: int | None = None  # 1-based line number in the text it came from

    def __post_init__(self) -> None:
        object.__setattr__(self, "category", FailureCategory(self.category))

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
           r"Do not use the XLA device", r"No PjRt ?[Pp]lugin registered",
           # XLA's own fatal log line (an unknown XLA_FLAGS flag, a failed CHECK) before it aborts.
           r": F +(?:\d+ +)?(?:external/(?:local_)?xla/)?(?:xla|tsl)/\S+:\d+\]",
           # A custom call XLA's compiler finds no kernel for on the device's platform.
           r"No registered implementation for (?:\w+ )?custom[- ]call", r"No FFI handler registered for"),
    # A device-side assert is an indexing bug in the program (labels out of range), not the GPU.
    *_rule("user_code_error", r"device-side assert triggered", r"Assertion `.*` failed"),
]

WEAK = [
    *_rule("nccl_error", r"NCCL WARN", r"NET/IB : Got completion .* with error"),
    *_rule("gloo_timeout_or_peer_lost", r"Connection reset by peer", r"Broken pipe"),
    *_rule("preemption_or_node_lost", r"got signal: 15", r"Terminated\s*$"),
]

# A SIGKILL reported after one of these is its root cause (a peer killed, the survivors then lost it),
# except after NCCL's watchdog timeout: that line comes a whole process-group timeout after a peer
# stopped, so a peer's SIGKILL on the node would have been reported first, and one reported later is
# the timed-out rank's own teardown (seen on an H200: the supervisor's stop after the timeout line).
KILL_EXPLAINS = COMMUNICATION - {"nccl_timeout"}

# Consequences of a failure elsewhere: never the evidence. (torchrun's "failed (exitcode: N)" for a
# rank that exited with a status; one killed by a signal, "exitcode: -9", is a signal's line.)
CONSEQUENCE = re.compile(
    r"closing signal SIGTERM|ChildFailedError|Some NCCL operations have failed or timed out|"
    r"To avoid data inconsistency|failed \(exitcode: ?\d|torch\.distributed\.elastic\.multiprocessing\.errors|"
    r"Stack trace of the failed collective not found|preparing to dump debug info|"
    r"CUDA kernel errors might be asynchronously reported|For debugging consider passing|"
    r"Compile with `TORCH_USE_CUDA_DSA`|subprocess\.CalledProcessError|"
    r"(?:[\w.]+\.)?ProcessExitedException: process \d+ terminated with exit code -?\d+")

_PREFIX = re.compile(r"^(?:\[(?:default|rank)\d+\]:\s?|\[stderr\]\s?|\[stdout\]\s?|\(\w+ pid=\d+(?:, ip=[\d.]+)?\) ?"
                     r"|\S+:\s(?=Traceback|\w+Error))")
_TRACEBACK = "Traceback (most recent call last):"
# The last line of a traceback: "KeyError: 'x'", "pkg.mod.MyError", "MyThing: message". A bare
# "Word:" (torchrun's "Failures:") is not one.
_ORDINARY_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.[A-Za-z_]\w*(?::|$)"
    r"|[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Iteration|Warning)(?::|$)"
    r"|[A-Za-z_]\w*: \S)")
# An exception that only carries another: mp.spawn's ProcessRaisedException (its message is the
# child's traceback), or any exception line whose message starts on the next line (older torch's
# "Exception:" before "-- Process 1 terminated with the following error:").
_WRAPPER = re.compile(r"^(?:[\w.]+\.)?ProcessRaisedException\b|"
                      r"^(?:[A-Za-z_][\w.]*\.[A-Za-z_]\w*|[A-Za-z_]\w*(?:Error|Exception)):\s*$")

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>\S+))?')
# A traceback through checkpoint I/O ends in a checkpoint error, whatever the exception's type.
_CHECKPOINT_IO = re.compile(r"torch/distributed/(?:_shard/)?checkpoint/|torch/serialization\.py|safetensors|"
                            r"\bcheckpoint(?:_utils|ing)?\.py|"
                            r"\b(?:load|save)_(?:checkpoint|state_dict|sharded_optimizer_state_dict)\b|"
                            r"_load_from_state_dict|\bdcp\.(?:load|save)\b|torch\.load\(|load_state_dict\(|"
                            r"resume_from_checkpoint|_load_from_checkpoint|state_dict_type")
# An exception raised inside a library the training runs on is that library's failure, whatever
# its type: torch_xla refusing a mesh, a partition spec or a PJRT device (the frame it was raised in).
RAISED_IN = [(re.compile(r"(?:^|[/\\])torch_xla[/\\]"), "xla_error")]
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

# What fsdp-orch's own fault injection prints before it ends a rank (FSDP_ORCH_FAULT: crash, kill,
# checkpoint_crash); a hang or a skipped collective it injects is found the way a real one is.
_INJECTED = re.compile(r"\[fsdp-orch fault\] rank \d+: injected (?:crash|SIGKILL)\b")


def display_frame(file: str, line: str | int, func: str | None = None) -> str:
    """A frame as evidence names it, as the hang evidence does: user code by its base name, library
    code as ``.../pkg/mod.py``."""
    where = f"{display_path(file.replace(chr(92), '/'), ())}:{line}"
    return f"{where} in {func}" if func else where


def _is_library(file: str) -> bool:
    return is_library_file(file.replace(chr(92), "/"), ())


# The note a Diagnosis adds after the line it quotes: where the exception was raised, or the signal
# a line names only by its number.
_NOTE = re.compile(r" \((?:at [^()]*(?:\([^()]*\)[^()]*)*|SIG[A-Z0-9]+|signal \d+)\)$")


def quoted(evidence: str) -> str:
    """The line of the log an evidence quotes, without the note the classifier adds to it."""
    return _NOTE.sub("", evidence)


def _match(rules: list[tuple[str, re.Pattern[str]]], line: str) -> str | None:
    for category, pattern in rules:
        if pattern.search(line):
            return category
    return None


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


@dataclass
class _Traceback:
    """What is known of the traceback being read: its frames' indent, its last frame and its last
    frame of user code, and whether it went through checkpoint I/O."""

    base: int = 0  # the indent of its exception line (2 in torchrun's failure summary, else 0)
    frame_seen: bool = False
    last: tuple[str, str, str | None] | None = None
    user: tuple[str, str, str | None] | None = None
    checkpoint_io: bool = False

    def where(self) -> str:
        """`` (at .../torch/cuda/__init__.py:261 in set_device, from train.py:50 in main)``, or ``""``."""
        if self.last is None:
            return ""
        note = display_frame(*self.last)
        if self.user is not None and self.user != self.last:
            note += f", from {display_frame(*self.user)}"
        return f" (at {note})"


class LineScanner:
    """Feeds lines one at a time (a live log); remembers the first root cause and the first weak sign.

    One scanner per stream: a Python traceback is followed line by line to its exception line.
    """

    def __init__(self) -> None:
        self.first: Diagnosis | None = None
        self.weak: Diagnosis | None = None
        self.wrapper: Diagnosis | None = None  # an exception that carries another, until that one is read
        self._in_traceback = False
        self._tb = _Traceback()
        self._checkpoint_frame: tuple[str, int] | None = None
        self._crashed = False
        self._other_failures = False  # inside torchrun's "Failures:" list (ranks that failed later)
        self._killed_after: Diagnosis | None = None  # a SIGKILL reported after a lost peer
        self._count = 0

    def feed(self, raw: str) -> Diagnosis | None:
        """Returns the root cause as soon as one is known (and keeps returning it)."""
        self._count += 1
        body = _PREFIX.sub("", raw.rstrip("\r\n"))
        line = body.strip()
        if self.first is not None:
            if self.first.category in KILL_EXPLAINS and self._killed_after is None and line:
                if not self._note_summary(line):
                    self._killed_after = self._signal(line, only="killed_sigkill")
            return self.first
        if not line or self._note_summary(line):
            return None
        frame = _FRAME.match(body)
        if _TRACEBACK in line or line.startswith("Exception in thread") or frame:
            if not self._in_traceback or (_TRACEBACK in line and self.wrapper is not None):
                self._tb = _Traceback()
            self._in_traceback = True
            self._note_checkpoint_io(line)
            if frame:
                self._note_frame(frame, body)
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
        injected = _INJECTED.search(line)
        if injected:
            self.first = Diagnosis("injected_fault", True, line[injected.start():], self._count)
            return self.first
        # What only reports another failure is cut out; what is left of the line may still be a cause.
        line = CONSEQUENCE.sub(" ", line).strip()
        if len(line) < 3:
            if not body[:1].isspace() and self.wrapper is None:
                self._in_traceback = False  # e.g. torchrun's own traceback ends in ChildFailedError
            return None
        category = _match(STRONG, line)
        exception_line = self._in_traceback and _indent(body) <= self._tb.base and not line.startswith(
            ("File ", "^", "~", "During handling", "The above")) and _ORDINARY_EXCEPTION.match(line)
        where = self._tb.where() if exception_line else ""
        if category is not None:
            self.first = Diagnosis(category, category not in NOT_RETRYABLE, evidence + where, self._count)
            return self.first
        signalled = self._signal(evidence, where=where)
        if signalled is not None:
            self.first = signalled
            return self.first
        if exception_line:
            return self._exception(evidence, where)
        if self.wrapper is None and _WRAPPER.match(line) and not body[:1].isspace():
            self._wrap(evidence)  # also where an excerpt lost the traceback above it
            return None
        if self.weak is None:
            weak = _match(WEAK, line)
            if weak is None and _BUILTIN_EXCEPTION.match(line) and not body[:1].isspace():
                weak = "user_code_error"
            if weak is None and not self._crashed and _STACK_DUMP.match(line):
                weak = "hang"
            if weak is not None:
                self.weak = Diagnosis(weak, weak not in NOT_RETRYABLE, evidence, self._count)
        return None

    def _exception(self, evidence: str, where: str) -> Diagnosis | None:
        """The line that ends a traceback: a user's error (or the library's it was raised in), unless it
        only carries another exception."""
        self._in_traceback = False
        if _WRAPPER.match(evidence):
            self._wrap(evidence + where)
            return None
        if evidence.startswith("KeyboardInterrupt"):  # someone stopped a process that sat still
            self.weak = self.weak or Diagnosis("hang", True, evidence, self._count)
            return None
        category = "checkpoint_error" if self._tb.checkpoint_io else self._raised_in()
        self.first = Diagnosis(category, category not in NOT_RETRYABLE, evidence + where, self._count)
        return self.first

    def _raised_in(self) -> str:
        """The category of the library the exception was raised in (its last frame), else the user's."""
        if self._tb.last is not None:
            for pattern, category in RAISED_IN:
                if pattern.search(self._tb.last[0]):
                    return category
        return "user_code_error"

    def _wrap(self, evidence: str) -> None:
        """An exception that carries another: the evidence only if no real exception follows. What
        follows is read as the inner exception's traceback, even where its header was cut off."""
        self.wrapper = Diagnosis("user_code_error", False, evidence, self._count)
        self._in_traceback = True
        self._tb = _Traceback()

    def _signal(self, line: str, where: str = "", only: str | None = None) -> Diagnosis | None:
        """A line that says a process ended by a signal, as a cause; the signal's name is added where
        the line gives only its number."""
        name = signal_named(line)
        category = signal_category(name) if name else None
        if name is None or category is None or (only is not None and category != only):
            return None
        note = where or ("" if name in line else f" ({name})")
        return Diagnosis(category, True, line + note, self._count)

    def _note_summary(self, line: str) -> bool:
        """Follows torchrun's failure summary; True inside its "Failures:" list, the ranks that failed
        after the first (the ones torchrun stopped itself, by SIGTERM or SIGKILL, among them): only
        its "Root Cause" block, which follows, names a cause."""
        if line == "Failures:":
            self._other_failures = True
        elif line.startswith((_ROOT_CAUSE, "===")):
            self._other_failures = False
        return self._other_failures

    def _note_frame(self, frame: re.Match[str], body: str) -> None:
        tb = self._tb
        if not tb.frame_seen:
            tb.frame_seen = True
            tb.base = max(0, _indent(body) - 2)
        tb.last = (frame["file"], frame["line"], frame["func"])
        if not _is_library(frame["file"]):
            tb.user = tb.last

    def _note_checkpoint_io(self, line: str) -> None:
        if _CHECKPOINT_IO.search(line):
            self._tb.checkpoint_io = True
            self._checkpoint_frame = self._checkpoint_frame or (line, self._count)

    def result(self) -> Diagnosis | None:
        """The root cause (a SIGKILL of a rank rather than the lost peer it caused), else a traceback
        through checkpoint I/O cut off before its exception line, else an exception that only carried
        another whose inner exception never came, else the first weak sign."""
        if self.first is not None:
            return self._killed_after or self.first
        if self._in_traceback and self._checkpoint_frame is not None:
            line, number = self._checkpoint_frame
            return Diagnosis("checkpoint_error", False, line, number)
        return self.wrapper or self.weak


def diagnose_text(text: str) -> Diagnosis:
    """The category of the first root cause in ``text``; ``unknown`` when nothing is recognised."""
    scanner = LineScanner()
    for line in text.splitlines():
        cause = scanner.feed(line)
        if cause is not None and (cause.category not in COMMUNICATION or scanner.result() is not cause):
            break
    return scanner.result() or Diagnosis("unknown", True, None, None)


def diagnose_lines(lines: Iterable[str]) -> Diagnosis:
    return diagnose_text("\n".join(lines))


def diagnose_exit(code: int | None) -> Diagnosis:
    """When the logs say nothing: what the exit status alone tells (negative, or above 128 from a
    shell: ended by a signal)."""
    if code is None:
        return Diagnosis("preemption_or_node_lost", True, "the attempt's processes disappeared", None)
    if code == NODE_LOST_EXIT:
        return Diagnosis("preemption_or_node_lost", True, "a node stopped answering (its host is named in "
                                                          "the supervisor's log)", None)
    signum = -code if code < 0 else code - 128 if 128 < code < 192 else None
    if signum is None:
        return Diagnosis("unknown", True, f"exited with code {code}", None)
    name = SIGNALS.get(signum, f"signal {signum}")
    category = signal_category(name)
    if category is None:
        return Diagnosis("preemption_or_node_lost", True, f"terminated by SIGTERM (exit {code})", None)
    if category == "killed_sigkill":
        return Diagnosis(category, True, f"killed by SIGKILL (exit {code}): the kernel OOM killer, the "
                                         "scheduler or an external kill", None)
    return Diagnosis(category, True, f"ended by {name} (signal {signum}, exit {code})", None)


def cause_at_exit(code: int, cause: Diagnosis | None, root: tuple[int, int, int] | None,
                  cause_rank: int | None, logs: Iterable[Iterable[str]] = ()) -> Diagnosis:
    """Why an attempt that exited with ``code`` failed: the logs' root cause (``cause``), unless
    torchrun's summary says another rank failed first (``root``: global rank, local rank, exit code)
    and the logs only show its peers losing it (``cause_rank``: the local rank whose output held the
    cause, if known), or one of ``logs`` (each a log's last lines) reports a rank's SIGKILL after
    the lost peer; then that rank's ending is the cause."""
    if root is not None and root[2] != 0:
        rank, local_rank, rank_code = root
        if cause is None or (cause.category in COMMUNICATION and cause_rank != local_rank):
            base = diagnose_exit(rank_code)
            return Diagnosis(base.category, base.retryable, f"rank {rank} failed first: {base.evidence}", None)
    if cause is not None and cause.category in COMMUNICATION:
        for lines in logs:
            killed = diagnose_lines(lines)
            if killed.category == "killed_sigkill":
                return killed
    return cause or diagnose_exit(code)


def died_of_a_signal(code: int, cause: Diagnosis | None, root: tuple[int, int, int] | None) -> bool:
    """Whether an attempt (or, under torchrun, its first failed rank: ``root``) ended by a signal with
    nothing in its logs but a lost peer or that signal: how a crash in the processes' teardown looks."""
    if cause is not None and cause.category not in COMMUNICATION | SIGNAL_ENDINGS | {"unknown"}:
        return False
    return code < 0 or (root is not None and root[2] < 0)


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
