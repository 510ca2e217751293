"""What a log line or an exit status says about a process ended by a signal: which signal, and the
failure category it makes (``killed_sigkill``, ``crashed_signal``). Pure."""

from __future__ import annotations

import re

from fsdp_orch.vocab.categories import FailureCategory

# Linux's signal numbers (the logs come from Linux hosts, whatever machine reads them).
SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
           7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
           13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ", 31: "SIGSYS"}
# strsignal()'s words, as shells, the DataLoader and "Fatal Python error" print them.
_SIGNAL_WORDS = {"Killed": "SIGKILL", "Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS",
                 "Aborted": "SIGABRT", "Floating point exception": "SIGFPE",
                 "Illegal instruction": "SIGILL"}
_WORD = "|".join(_SIGNAL_WORDS)
# Lines that say a process ended by a signal. Each names it by name (group "name"), by number (group
# "num", negative as an exit code) or by strsignal()'s word (groups "word..."); a "bus" line is the
# DataLoader's before a SIGBUS, a "kill" line the kernel's OOM killer or a container's.
_SIGNAL_LINES = [re.compile(p) for p in (
    r"Signal \d+ \((?P<name>SIG[A-Z0-9]+)\) received by PID",  # torchrun's failure summary
    r"died with <Signals\.(?P<name>SIG[A-Z0-9]+): \d+>",  # subprocess.CalledProcessError
    r"terminated with signal (?P<name>SIG[A-Z0-9]+)",  # mp.spawn's ProcessExitedException
    r"interrupted by signal \d+: (?P<name>SIG[A-Z0-9]+)",
    # torchrun: "failed (exitcode: -9)", the summary's "exitcode : -9"
    r"\bexitcode\s*:\s*(?P<num>-\d+)",
    r"exits with return code = (?P<num>-\d+)",  # DeepSpeed's launcher
    r"\bWTERMSIG (?P<num>\d+)",  # slurmctld
    r"\*\*\* (?P<name>SIG[A-Z0-9]+) received",  # absl's failure signal handler (XLA)
    r"\b(?P<name>SIG[A-Z0-9]+)\(\d+\), PID: \d+",  # c10's failure signal handler
    rf"is killed by signal: (?P<word>{_WORD})",  # a DataLoader worker
    rf"Fatal Python error: (?P<word>{_WORD})",
    r"(?P<word>Segmentation fault|Bus error|Illegal instruction|Floating point exception)\b"
    r"|(?P<word_abort>Aborted) \(core dumped\)",  # a shell's report
    # a shell's report of kill -9
    r"^\W*(?P<word>Killed)\W*$|: line \d+: +\d+ (?P<word_job>Killed)\b",
    r"(?P<bus>Unexpected bus error encountered in worker)",  # the DataLoader, before the SIGBUS
    r"(?P<kill>Out of memory: Kill(?:ed)? process|\boom-kill\b|\boom_kill_process|"
    r"Memory cgroup out of memory|Detected \d+ oom[-_]kill event|out-of-memory handler|"
    r"\bOOMKilled\b|exit(?:ed with)? (?:code|status)[ :=]*137\b)",
)]


def signal_named(line: str) -> str | None:
    """The signal a line says a process ended by (``SIGKILL``), or None."""
    for pattern in _SIGNAL_LINES:
        m = pattern.search(line)
        if m is None:
            continue
        kind, value = next((k, v) for k, v in m.groupdict().items() if v is not None)
        if kind == "name":
            return value
        if kind == "num":
            return SIGNALS.get(abs(int(value)), f"signal {abs(int(value))}")
        if kind in ("bus", "kill"):
            return "SIGBUS" if kind == "bus" else "SIGKILL"
        return _SIGNAL_WORDS[value]
    return None


def signal_category(name: str) -> FailureCategory | None:
    """The category of a rank ended by signal ``name``; None for SIGTERM, which another process
    sends (torchrun stopping the other ranks, a scheduler): it names no cause of its own."""
    if name == "SIGTERM":
        return None
    return (FailureCategory.KILLED_SIGKILL if name == "SIGKILL"
            else FailureCategory.CRASHED_SIGNAL)
