"""The doing half of ``tpu_gcloud``: one profile's TPU VM brought to READY through the gcloud CLI
(the injected runner), waiting with backoff (tenacity, the injected clock and sleep), deleting and
creating it where the profile owns it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NoReturn

from fsdp_orch.backends.tpu_vm.gcloud import (
    NOT_FOUND,
    TpuVmState,
    create_argv,
    delete_argv,
    describe_argv,
    is_not_found,
    next_action,
    parse_describe,
    prepare_argv,
)
from fsdp_orch.observe.command import Runner, run, run_command
from fsdp_orch.vocab.backoff import TPU_READY, retrying
from fsdp_orch.vocab.errors import CommandError, FsdpOrchError

DESCRIBE_TIMEOUT_S = 120.0
# gcloud's create and delete wait for the operation (minutes on a pod slice)
CHANGE_TIMEOUT_S = 1800.0
PREPARE_TIMEOUT_S = 1800.0  # the profile's prepare lines (a pip install)


class TpuVm:
    def __init__(self, profile: Any, runner: Runner = run,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.profile = profile
        self.runner = runner
        self.clock = clock
        self.sleep = sleep

    def _gcloud(self, argv: list[str], timeout: float) -> str:
        try:
            return run_command(argv, timeout, self.runner)
        except CommandError as exc:
            if exc.returncode == 127:
                raise FsdpOrchError("gcloud is not on PATH: the tpu-vm kind drives "
                                    "TPU VMs through the Google Cloud CLI (install it "
                                    "and run `gcloud auth login`)") from None
            raise

    def describe(self) -> TpuVmState:
        """The TPU VM as ``describe`` has it now; state NOT_FOUND when there is none."""
        argv = describe_argv(self.profile)
        try:
            out = self._gcloud(argv, DESCRIBE_TIMEOUT_S)
        except CommandError as exc:
            if is_not_found(exc.output):
                return TpuVmState(name=self.profile.tpu_name, state=NOT_FOUND)
            raise
        try:
            return parse_describe(self.profile.tpu_name, out)
        except ValueError as exc:
            raise FsdpOrchError(str(exc)) from None

    def ready(self, say: Callable[[str], None]) -> TpuVmState:
        """Describe, and act on what it says until the TPU VM is READY with the profile's workers:
        wait (backing off, up to ``ready_timeout``), delete a preempted one, create a missing one
        (both only with ``owns_vm``). ``say``: each new thing seen or done. FsdpOrchError when it
        cannot be had."""
        profile = self.profile
        said: str | None = None

        def look() -> tuple[str, TpuVmState]:
            """Describe, deleting or creating as that says,
            until the TPU VM is to be used or waited for."""
            nonlocal said
            while True:
                vm = self.describe()
                action, why = next_action(vm, profile.owns_vm)
                if why != said and action != "use":
                    say(why)
                    said = why
                if action in ("use", "wait"):
                    return action, vm
                if action == "fail":
                    raise FsdpOrchError(why)
                if action == "delete":
                    self._gcloud(delete_argv(profile), CHANGE_TIMEOUT_S)
                    say(f"TPU VM {profile.tpu_name} deleted")
                elif action == "create":
                    self._gcloud(create_argv(profile), CHANGE_TIMEOUT_S)
                    say(f"TPU VM {profile.tpu_name} created ({profile.accelerator_type}, "
                        f"{profile.runtime_version}{', spot' if profile.spot else ''})")

        def waited_too_long(state: Any) -> NoReturn:
            _, vm = state.outcome.result()
            raise FsdpOrchError(f"{vm.summary()} after waiting "
                                f"ready_timeout ({profile.ready_timeout}s)")

        waiting = retrying(TPU_READY, sleep=self.sleep, not_yet=lambda seen: seen[0] == "wait",
                           deadline=self.clock() + profile.ready_timeout, clock=self.clock,
                           gave_up=waited_too_long)
        _, vm = waiting(look)
        return self._checked(vm)

    def _checked(self, vm: TpuVmState) -> TpuVmState:
        workers = vm.addresses(self.profile.address)
        if len(workers) != self.profile.num_workers or not all(workers):
            raise FsdpOrchError(f"{vm.summary()} with {len(workers)} worker address(es) of kind "
                                f"{self.profile.address} ({', '.join(workers) or 'none'}); "
                                f"the profile says num_workers: {self.profile.num_workers} "
                                f"({self.profile.accelerator_type})")
        return vm

    def prepare(self) -> None:
        """``prepare_argv`` on every worker at once."""
        self._gcloud(prepare_argv(self.profile), PREPARE_TIMEOUT_S)
