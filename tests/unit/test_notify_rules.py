"""Notifications: the spec's checks, which changes are due, and the retry loop under an injected
clock with a FAKE poster (the real HTTP path is tests/integration/test_notify.py)."""

from __future__ import annotations

import pytest

from fsdp_orch.errors import InputError
from fsdp_orch.jobspec.loading import load_job_text
from fsdp_orch.jobspec.notify import Webhook
from fsdp_orch.notify.delivery import MAX_RETRY_S, Notifier
from fsdp_orch.notify.due import changes, due


def hook_error(entry: str) -> InputError:
    with pytest.raises(InputError) as err:
        load_job_text("name: j\nscript: t.py\nnotify:\n  - " + entry + "\n")
    return err.value


def test_spec_errors_name_the_field_and_what_was_expected():
    err = hook_error("{url: 'ftp://x/y'}")
    assert err.field == "notify.0.url" and "http:// or https://" in err.detail
    err = hook_error("{url: 'http://h/x', when: [SUCEEDED]}")
    assert err.field.startswith("notify.0.when") and "did you mean 'SUCCEEDED'" in err.detail
    err = hook_error("{url: 'http://h/x', retry_for: soon}")
    assert err.field == "notify.0.retry_for" and "duration" in err.detail
    err = hook_error("{url: 'http://h/x', format: xml}")
    assert err.field == "notify.0.format"


def test_defaults_are_the_ends_of_a_job():
    job = load_job_text("name: j\nscript: t.py\nnotify: [{url: 'https://h/x'}]\n")
    assert job.notify[0].when == ["SUCCEEDED", "FAILED", "CANCELLED"] and job.notify[0].retry_for == 600


def ev(at: float, kind: str, seq: int, **fields) -> dict:
    return {"at": at, "kind": kind, "seq": seq, **fields}


EVENTS = [
    ev(1, "submitted", 1), ev(2, "attempt_started", 1, attempt=0), ev(3, "progress", 2),
    ev(4, "failure_detected", 3, category="hang"), ev(5, "restart_scheduled", 4),
    ev(6, "attempt_started", 5, attempt=1), ev(7, "attempt_started", 6, attempt=1),  # the same state again
    ev(8, "finished", 7, state="SUCCEEDED"), ev(9, "state", 8, state="RUNNING"),  # nothing after the end
]


def test_each_state_entered_once_and_events_by_kind():
    found = [(trigger, e["at"]) for trigger, e in changes(EVENTS)]
    assert [t for t, _ in found if t.isupper()] == ["PENDING", "RUNNING", "RESTARTING", "RUNNING", "SUCCEEDED"]
    assert ("failure_detected", 4) in found and ("restart_scheduled", 5) in found


def test_due_filters_by_hook_and_skips_what_the_ledger_has():
    hooks = [Webhook(url="http://a/x", when=["RUNNING", "SUCCEEDED"]), Webhook(url="http://b/x", when=["failure_detected"])]
    items = due(EVENTS, hooks, set())
    assert [(d.hook, d.trigger, d.at) for d in items] == [
        (0, "RUNNING", 2), (1, "failure_detected", 4), (0, "RUNNING", 6), (0, "SUCCEEDED", 8)]
    assert due(EVENTS, hooks, {items[0].key, items[2].key}) == [items[1], items[3]]


class FakeJob:
    """The job's event log in a folder, a FAKE poster that fails until told otherwise, a manual clock."""

    def __init__(self, tmp_path, events):
        from fsdp_orch.events import EventWriter

        writer = EventWriter(tmp_path, "submit")
        for e in events:
            writer.append(e["kind"], at=e["at"], **{k: v for k, v in e.items() if k not in ("at", "kind", "seq")})
        self.now = 100.0
        self.posts: list[tuple[float, str]] = []
        self.down_until = 0.0

    def post(self, url, data, headers):
        if self.now < self.down_until:
            raise ConnectionRefusedError("down")
        self.posts.append((self.now, url))

    def sleep(self, seconds):
        self.now += seconds


def notifier(tmp_path, job: FakeJob, hooks, gave_up=lambda d, e: None) -> Notifier:
    return Notifier(str(tmp_path), hooks, post=job.post, status=lambda: {"id": "j"}, clock=lambda: job.now,
                    sleep=job.sleep, gave_up=gave_up)


def test_a_receiver_down_is_retried_with_backoff_and_served_in_order(tmp_path):
    job = FakeJob(tmp_path, [ev(100, "submitted", 1), ev(100, "attempt_started", 2, attempt=0),
                             ev(100, "finished", 3, state="SUCCEEDED")])
    job.down_until = 160.0
    hook = Webhook(url="http://a/x", when=["RUNNING", "SUCCEEDED"], retry_for="5m")
    notifier(tmp_path, job, [hook]).run()
    # tries at 100, 101, 103, 107, 115, 131 (the delay doubles from 1 s, capped at 30 s), then 161: up
    assert [t for t, _ in job.posts] == [pytest.approx(161.0), pytest.approx(161.5)]
    # run again (a notifier restarted): the ledger says both were sent
    again = FakeJob(tmp_path / "x", [])
    n = notifier(tmp_path, again, [hook])
    assert n.pass_once() and again.posts == []


def test_gives_up_after_retry_for_and_says_so(tmp_path):
    job = FakeJob(tmp_path, [ev(100, "submitted", 1), ev(101, "finished", 2, state="FAILED")])
    job.down_until = 10_000.0
    gave: list[str] = []
    notifier(tmp_path, job, [Webhook(url="http://a/x", when=["FAILED"], retry_for="90s")],
             gave_up=lambda d, e: gave.append(d.trigger)).run()
    assert gave == ["FAILED"] and job.posts == [] and 191 <= job.now <= 191 + MAX_RETRY_S + 1
