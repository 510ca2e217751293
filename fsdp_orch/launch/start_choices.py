"""How a job's ranks start where its spec leaves it to the launch: the ``distributed_type`` of
the accelerate config (with a notice where it is not the FSDP the job asks for; a Trainer's own
--fsdp on CPU too), and a warm standby or a cold start. Pure."""

from __future__ import annotations

from fsdp_orch.jobspec.schema import JobSpec

# Accelerate runs FSDP only on GPUs: on CPU the config fsdp-orch writes says MULTI_CPU, and
# ``accelerate launch`` runs the ranks as DDP over gloo (the plain config would fail there).
ACCELERATE_FSDP_ON_CPU = ("accelerate config: distributed_type FSDP runs as MULTI_CPU (DDP; the "
                          "fsdp options do not apply) on CPU: Accelerate runs FSDP only on GPUs")


def accelerate_distributed_type(launcher: str, device: str) -> tuple[str | None, tuple[str, ...]]:
    """The ``distributed_type`` of the accelerate config fsdp-orch writes, and the notice when it is
    not the FSDP the job asks for."""
    if launcher != "accelerate":
        return None, ()
    if device == "cpu":
        return "MULTI_CPU", (ACCELERATE_FSDP_ON_CPU,)
    return "FSDP", ()


# A Hugging Face Trainer script's own FSDP flags (TrainingArguments), with "-" for "_" as
# HfArgumentParser also takes them.
TRAINER_FSDP_FLAGS = ("--fsdp", "--fsdp_config", "--fsdp-config")
# The Trainer hands --fsdp to Accelerate, which runs FSDP only on GPUs: on CPU its state is
# MULTI_CPU and the Trainer trains as DDP over gloo, with no word of it.
TRAINER_FSDP_ON_CPU = ("args pass {flag}: a Hugging Face Trainer runs FSDP only on GPUs; on CPU it "
                       "trains as DDP (the --fsdp options do not apply). The job's fsdp: block is "
                       "for scripts using fsdp_orch.runtime and never reaches a Trainer")


def trainer_fsdp_flag(args: list[str]) -> str | None:
    """The first of a Trainer's FSDP flags in the job's args (``--fsdp``, ``--fsdp_config=x``)."""
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in TRAINER_FSDP_FLAGS:
            return flag
    return None


def trainer_fsdp_notices(job: JobSpec, device: str) -> tuple[str, ...]:
    """The notice for a job whose args ask a Trainer for FSDP on CPU (under ``launcher:
    accelerate`` the accelerate config's notice says it)."""
    flag = trainer_fsdp_flag(job.args)
    if flag is None or device != "cpu" or job.launcher == "accelerate":
        return ()
    return (TRAINER_FSDP_ON_CPU.format(flag=flag),)


# The launchers whose ranks a standby can start: one Python program per rank (torchrun) or per node
# (python). accelerate launch and XLA set up their processes themselves.
STANDBY_LAUNCHERS = ("torchrun", "python")


def standby_choice(job: JobSpec, kind: str, kind_allows: bool, hosted: bool = False,
                   cold_because: str = "") -> tuple[bool, str]:
    """Whether the ranks start from a warm standby, and the one-line reason ``render`` says."""
    if job.launch.standby == "off":
        return False, "cold start: launch.standby is off"
    if job.launcher not in STANDBY_LAUNCHERS:
        return False, (f"cold start: the warm standby runs a Python script or module under "
                       f"{' or '.join(STANDBY_LAUNCHERS)}, not launcher {job.launcher}")
    if job.entry[0] == "command":
        return False, "cold start: the warm standby runs a Python script or module, not a command"
    if not kind_allows and cold_because:
        return False, f"cold start: {cold_because}"
    if not kind_allows:
        return False, (f"cold start: the {kind} kind starts its ranks cold (the warm "
                       "standby is not built for it)")
    if hosted:
        return True, ("warm standby: each attempt's ranks start from a process that has imported "
                      "torch, kept ready on every node of the allocation (spares included) by a "
                      f"job step of its own ({job.launcher}, launch.standby: auto)")
    return True, ("warm standby: each attempt's ranks start from a process that has imported torch "
                  f"({job.launcher}, launch.standby: auto)")


__all__ = ["ACCELERATE_FSDP_ON_CPU", "STANDBY_LAUNCHERS", "TRAINER_FSDP_FLAGS",
           "TRAINER_FSDP_ON_CPU", "accelerate_distributed_type", "standby_choice",
           "trainer_fsdp_flag", "trainer_fsdp_notices"]
