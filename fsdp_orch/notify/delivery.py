"""The notifier's loop: read the job's events, POST what is due, one queue per webhook (a receiver
that is down holds up only its own notifications, and each receives them in order), retry with
backoff until the webhook's ``retry_for`` after the change, and keep a ledger so nothing is POSTed
twice, even by a notifier started again. Clock, sleep, POST and status are injected."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

from fsdp_orch.jobspec.notify import Webhook
from fsdp_orch.notify.due import Due, Logged, due, ended
from fsdp_orch.notify.payload import body
from fsdp_orch.record.events import event_files, order_key, read_from
from fsdp_orch.record.status import JobStatus
from fsdp_orch.vocab.backoff import WEBHOOK, TriedByTheCaller

FIRST_RETRY_S = WEBHOOK.first
MAX_RETRY_S = WEBHOOK.most
POLL_S = 0.5

Post = Callable[[str, bytes, dict[str, str]], None]  # raises on failure


@dataclass
class _Pending:
    due: Due
    next_try: float
    tries: int = 0
    retries: TriedByTheCaller | None = None  # from its first failure on


class EventFeed:
    """The job's events as they are appended, each with its file, in ``order_key`` order (as
    ``read_job`` orders them). Reads only what the files gained since the last look."""

    # One per training step: never a change of state and not a trigger; kept out of memory.
    SKIPPED = frozenset({"progress"})

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.offsets: dict[str, tuple[int, int]] = {}
        self.events: list[Logged] = []

    def read(self) -> bool:
        """Take in what was appended; True when anything that counts was."""
        new = []
        for path in event_files(self.run_dir):
            result = read_from(path, *self.offsets.get(path, (0, 0)))
            self.offsets[path] = (result.offset, result.line)
            writer = os.path.basename(path)
            new += [Logged(writer, e) for e in result.events if e["kind"] not in self.SKIPPED]
        if new:
            self.events = sorted(self.events + new,
                                 key=lambda item: order_key(item.event, item.writer))
        return bool(new)


class Ledger:
    """``notify/sent.jsonl``: one line per notification delivered or given up."""

    def __init__(self, directory: str):
        from fsdp_orch.places.private import make_private_dirs

        make_private_dirs(directory)
        self.path = os.path.join(directory, "sent.jsonl")

    def keys(self) -> set[str]:
        try:
            with open(self.path) as f:
                return {json.loads(line)["key"] for line in f if line.strip()}
        except FileNotFoundError:
            return set()

    def add(self, key: str, outcome: str, at: float, tries: int) -> None:
        from fsdp_orch.places.private import open_private

        with os.fdopen(open_private(self.path, os.O_WRONLY | os.O_APPEND), "a") as f:
            f.write(json.dumps({"key": key, "outcome": outcome, "at": at, "tries": tries}) + "\n")


class Notifier:
    def __init__(self, run_dir: str, hooks: list[Webhook], *, post: Post,
                 status: Callable[[], JobStatus | None], clock: Callable[[], float],
                 sleep: Callable[[float], None],
                 gave_up: Callable[[Due, str], None] = lambda d, e: None):
        self.run_dir = run_dir
        self.hooks = hooks
        self.post = post
        self.status = status
        self.clock = clock
        self.sleep = sleep
        self.gave_up = gave_up
        self.ledger = Ledger(os.path.join(run_dir, "notify"))
        self.feed = EventFeed(run_dir)
        self.queues: dict[int, list[_Pending]] = {i: [] for i in range(len(hooks))}

    def pass_once(self) -> bool:
        """One look at the events and one try per webhook whose head is due. True when the job
        ended and nothing is left to send."""
        now = self.clock()
        if self.feed.read():
            queued = {p.due.key for q in self.queues.values() for p in q}
            for item in due(self.feed.events, self.hooks, self.ledger.keys() | queued):
                self.queues[item.hook].append(_Pending(item, next_try=now))
        for i, queue in self.queues.items():
            if queue and queue[0].next_try <= now:
                self._try(self.hooks[i], queue)
        return ended(self.feed.events) and not any(self.queues.values())

    def _try(self, hook: Webhook, queue: list[_Pending]) -> None:
        head = queue[0]
        head.tries += 1
        try:
            self.post(hook.url, body(head.due, self.status(), hook.format),
                      {"Content-Type": "application/json",
                       **hook.headers})  # type: ignore[dict-item]  # references filled in: notify.process
        except Exception as exc:  # noqa: BLE001 - any failure to deliver is retried the same way
            if head.retries is None:
                head.retries = TriedByTheCaller(WEBHOOK, deadline=head.due.at + hook.retry_for,
                                                clock=self.clock)
            wait = head.retries.failed(exc)
            now = self.clock()
            if wait is None:
                queue.pop(0)
                self.ledger.add(head.due.key, "gave_up", now, head.tries)
                self.gave_up(head.due, f"{type(exc).__name__}: {exc}")
            else:
                head.next_try = now + wait
            return
        queue.pop(0)
        self.ledger.add(head.due.key, "delivered", self.clock(), head.tries)

    def run(self) -> None:
        while not self.pass_once():
            self.sleep(POLL_S)


def http_post(url: str, data: bytes, headers: dict[str, str], timeout: float = 5.0) -> None:
    """POST; anything but a 2xx answer raises."""
    import urllib.request

    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    with urllib.request.urlopen(request,  # noqa: S310 - http(s) checked by the schema
                                timeout=timeout) as answer:
        if not 200 <= answer.status < 300:
            raise OSError(f"HTTP {answer.status}")


__all__ = ["FIRST_RETRY_S", "EventFeed", "Ledger", "MAX_RETRY_S", "Notifier", "http_post"]
