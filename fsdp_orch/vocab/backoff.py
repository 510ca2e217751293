"""How fsdp-orch tries a call to an outside system again (a webhook, gcloud, sshd, sacct and squeue,
SFTP): the waits, named here once, and a factory for tenacity's ``Retrying`` that sleeps through
the caller's sleep and reads the caller's clock, so a test records the delays instead of waiting.

tenacity is imported when a retry is built, never with this module: ``fsdp-orch status`` starts
without it."""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tenacity

Sleep = Callable[[float], object]  # time.sleep, or threading.Event.wait to be woken early
Clock = Callable[[], float]


@dataclass(frozen=True)
class Retries:
    """How a call is tried again: after ``first`` seconds, then ``factor`` times longer each time,
    never more than ``most``; at most ``tries`` tries (None: until a deadline or the caller says
    stop)."""

    first: float
    most: float
    factor: float = 2.0
    tries: int | None = None

    def wait(self) -> tenacity.wait.wait_base:
        import tenacity

        return tenacity.wait_exponential(multiplier=self.first, exp_base=self.factor, max=self.most)

    def delay(self, nth: int) -> float:
        """The wait after try ``nth`` (1: the first), as tenacity's own loop computes it."""
        # A wait strategy reads only the number of the try from the state of tenacity's loop.
        return float(self.wait()(
            types.SimpleNamespace(attempt_number=nth)))  # type: ignore[arg-type]


WEBHOOK = Retries(first=1.0, most=30.0)  # until the webhook's retry_for after the change
TPU_READY = Retries(first=2.0, most=30.0)  # until the profile's ready_timeout
# Refused or dropped on the way in (sshd restarting, or over MaxStartups when every host is
# connected to at once); a host that does not answer at all is not tried again: it is lost.
SSH_CONNECT = Retries(first=1.0, most=2.0, tries=3)
REPORT_STREAM = Retries(first=0.5, most=0.5, factor=1.0)  # a silent or ended report, opened again
SLURM_QUERY = Retries(first=1.0, most=4.0, tries=3)  # sacct or squeue failing on the way to SLURM
SLURM_STEPS_GONE = Retries(first=0.5, most=0.5, factor=1.0)  # squeue, until the steps are gone
SFTP = Retries(first=1.0, most=1.0, tries=2)  # a broken link, opened again once
# The API server asked again, until the supervisor's pod appears or its Job has ended.
K8S_SUPERVISOR_POLL = Retries(first=0.2, most=0.2, factor=1.0)
# A supervisor in a pod, until the one of the pod before it has let go of the job's lock.
SUPERVISOR_LOCK = Retries(first=0.5, most=0.5, factor=1.0)


def retrying(retries: Retries, *, sleep: Sleep,
             transient: Callable[[Exception], bool] = lambda e: False,
             not_yet: Callable[[Any], bool] = lambda result: False, deadline: float | None = None,
             clock: Clock | None = None, stop_when: Callable[[], bool] | None = None,
             gave_up: Callable[[tenacity.RetryCallState], Any] | None = None) -> tenacity.Retrying:
    """A tenacity ``Retrying`` that tries again after an error ``transient`` says is worth it, or a
    result ``not_yet`` says is not the one waited for, waiting ``retries``' delays through
    ``sleep``. It stops after ``retries.tries`` tries, once ``clock()`` reaches ``deadline``, or
    when ``stop_when()``; then ``gave_up(state)`` answers, by default the last try's own outcome
    (its error raised again, or its result returned)."""
    import tenacity

    def past_deadline(state: tenacity.RetryCallState) -> bool:
        assert clock is not None and deadline is not None
        return clock() >= deadline

    stops: list[Any] = []
    if retries.tries is not None:
        stops.append(tenacity.stop_after_attempt(retries.tries))
    if deadline is not None:
        if clock is None:
            raise ValueError("a deadline needs the clock it is read on")
        stops.append(past_deadline)
    if stop_when is not None:
        stops.append(lambda state: stop_when())
    def wait(seconds: float) -> None:
        sleep(seconds)

    return tenacity.Retrying(
        sleep=wait, wait=retries.wait(),
        stop=tenacity.stop_any(*stops) if stops else tenacity.stop_never,
        retry=(tenacity.retry_if_exception(lambda e: isinstance(e, Exception) and transient(e))
               | tenacity.retry_if_result(not_yet)),
        retry_error_callback=gave_up or last_outcome)


def last_outcome(state: tenacity.RetryCallState) -> Any:
    """The last try's result, or its error raised again."""
    assert state.outcome is not None
    return state.outcome.result()


class TriedByTheCaller:
    """The tries of one call that the caller's own loop makes, one per turn, for a loop that must
    not block on one call while it waits (a webhook's queue beside the others): after each
    failed try, tenacity says how long to wait before the next, or that it is time to give up."""

    def __init__(self, retries: Retries, *, deadline: float | None = None,
                 clock: Clock | None = None,
                 transient: Callable[[Exception], bool] = lambda e: True):
        import tenacity

        self._transient = transient
        # The caller's loop does the waiting: tenacity only decides, so its sleep is never called.
        self._retry = retrying(retries, sleep=lambda seconds: None, transient=transient,
                               deadline=deadline, clock=clock, gave_up=lambda state: None)
        self._state = tenacity.RetryCallState(self._retry, fn=None, args=(), kwargs={})

    def failed(self, error: BaseException) -> float | None:
        """Seconds to wait before the next try; None: give up (``error`` is not worth another
        try, the tries are used up, or the deadline has come)."""
        import tenacity

        if not (isinstance(error, Exception) and self._transient(error)):
            return None
        self._state.set_exception((type(error), error, error.__traceback__))
        self._retry.begin()  # its statistics, kept per thread, which iter counts in
        action = self._retry.iter(self._state)
        if isinstance(action, tenacity.DoSleep):
            self._state.prepare_for_next_attempt()
            return float(action)
        return None


__all__ = ["REPORT_STREAM", "SFTP", "SLURM_QUERY", "SLURM_STEPS_GONE", "SSH_CONNECT", "TPU_READY",
           "WEBHOOK", "Clock", "Retries", "Sleep", "TriedByTheCaller", "last_outcome", "retrying"]
