"""Notifications: which changes are due, what a POST carries, one notifier per job, and the retry
loop under an injected clock with a FAKE poster (the real HTTP path is
tests/integration/test_notify.py). The spec's checks: tests/unit/test_notify_spec.py."""

from __future__ import annotations

import fcntl
import json
import logging
import os

import pytest

from fsdp_orch.jobspec.notify import Webhook
from fsdp_orch.notify.delivery import MAX_RETRY_S, Notifier
from fsdp_orch.notify.due import Logged, changes, due
from fsdp_orch.notify.payload import body
from fsdp_orch.notify.process import main as notifier_main
from fsdp_orch.record.events import EventWriter
from fsdp_orch.record.status import JobStatus


def ev(at: float, kind: str, seq: int, writer: str = "supervisor-a.jsonl", **fields) -> Logged:
    return Logged(writer, {"at": at, "kind": kind, "seq": seq, **fields})


EVENTS = [
    ev(1, "submitted", 1, "submit-a.jsonl"), ev(2, "attempt_started", 1, attempt=0),
    ev(3, "checkpoint_committed", 2, step=50),
    ev(4, "failure_detected", 3, attempt=0, category="hang", action="restart"),
    # RESTARTING twice: one change
    ev(5, "restart_scheduled", 4), ev(5.5, "allocation_requeued", 5),
    ev(6, "attempt_started", 6, attempt=1),
    # nothing after the end
    ev(8, "finished", 7, state="SUCCEEDED"), ev(9, "state", 8, state="RUNNING"),
    ev(10, "checkpoint_committed", 9, step=100),
]


def test_each_state_entered_once_per_change_and_events_by_kind():
    found = [(c.trigger, c.logged.event["at"]) for c in changes(EVENTS)]
    assert [(t, at) for t, at in found if t.isupper()] == [
        ("PENDING", 1), ("RUNNING", 2), ("RESTARTING", 5), ("RUNNING", 6), ("SUCCEEDED", 8)]
    assert ("failure_detected", 4) in found and ("restart_scheduled", 5) in found
    assert ("checkpoint_committed", 3) in found and ("checkpoint_committed", 10) not in found


def test_due_filters_by_hook_and_skips_what_the_ledger_has():
    hooks = [Webhook(url="http://a/x", when=["RUNNING", "SUCCEEDED"]),
             Webhook(url="http://b/x", when=["failure_detected", "RESTARTING"])]
    items = due(EVENTS, hooks, set())
    assert [(d.hook, d.trigger, d.at) for d in items] == [
        (0, "RUNNING", 2), (1, "failure_detected", 4), (1, "RESTARTING", 5), (0, "RUNNING", 6),
        (0, "SUCCEEDED", 8)]
    assert len({d.key for d in items}) == len(items)
    assert due(EVENTS, hooks, {items[0].key, items[2].key}) == [items[1], items[3], items[4]]


def test_the_identity_of_an_event_is_its_file_and_seq():
    # the same seq and time in two writers' files (two supervisors) are two events
    hook = [Webhook(url="http://a/x", when=["restart_scheduled"])]
    twins = [ev(1, "submitted", 1, "submit-a.jsonl"),
             ev(2, "restart_scheduled", 4, "supervisor-a.jsonl"),
             ev(2, "restart_scheduled", 4, "supervisor-b.jsonl")]
    assert len({d.key for d in due(twins, hook, set())}) == 2


def test_a_json_body_is_the_status_and_the_change_it_is_for():
    hooks = [Webhook(url="http://a/x", when=["RUNNING", "failure_detected"])]
    running, failure = due(EVENTS, hooks, set())[:2]
    status = JobStatus(id="abc", name="demo", cluster="local", kind="local", run_dir="/r",
                       created_at=0.0, state="SUCCEEDED")
    sent = json.loads(body(running, status, "json"))
    assert sent["state"] == "SUCCEEDED"  # the status now; the notification says what it is for
    assert sent["notification"] == {"job": "abc", "state": "RUNNING", "trigger": "RUNNING",
                                    "at": "1970-01-01T00:00:02.000Z"}
    assert json.loads(body(failure, status, "json"))["notification"]["event"] == "failure_detected"
    text = json.loads(body(failure, status, "slack"))["text"]
    assert text == "fsdp-orch: job demo (abc) failure_detected at 1970-01-01T00:00:04.000Z: hang"


class FakeJob:
    """The job's event log in a folder, a FAKE poster that fails until told otherwise, a manual
    clock."""

    def __init__(self, tmp_path, events: list[Logged]):
        writer = EventWriter(tmp_path, "submit")
        for logged in events:
            e = logged.event
            writer.append(e["kind"], at=e["at"],
                          **{k: v for k, v in e.items() if k not in ("at", "kind", "seq")})
        self.now = 100.0
        self.posts: list[tuple[float, str, bytes]] = []
        self.down_until = 0.0

    def post(self, url, data, headers):
        assert headers["Content-Type"] == "application/json"
        if self.now < self.down_until:
            raise ConnectionRefusedError("down")
        self.posts.append((self.now, url, data))

    def sleep(self, seconds):
        self.now += seconds


def notifier(tmp_path, job: FakeJob, hooks, gave_up=lambda d, e: None) -> Notifier:
    return Notifier(str(tmp_path), hooks, post=job.post, status=lambda: None, clock=lambda: job.now,
                    sleep=job.sleep, gave_up=gave_up)


def test_a_receiver_down_is_retried_with_backoff_and_served_in_order(tmp_path):
    job = FakeJob(tmp_path, [ev(100, "submitted", 1), ev(100, "attempt_started", 2, attempt=0),
                             ev(100, "finished", 3, state="SUCCEEDED")])
    job.down_until = 160.0
    hook = Webhook(url="http://a/x", when=["RUNNING", "SUCCEEDED"], retry_for="5m")
    notifier(tmp_path, job, [hook]).run()
    # tries at 100, 101, 103, 107, 115, 131 (the delay doubles from 1 s, capped at 30 s), then 161:
    # up
    assert [t for t, _, _ in job.posts] == [pytest.approx(161.0), pytest.approx(161.5)]
    assert [json.loads(d)["notification"]["state"] for _, _, d in job.posts] == [
        "RUNNING", "SUCCEEDED"]
    # run again (a notifier restarted): the ledger says both were sent
    again = FakeJob(tmp_path / "x", [])
    n = notifier(tmp_path, again, [hook])
    assert n.pass_once() and again.posts == []


def test_a_receiver_down_holds_up_only_its_own_notifications(tmp_path):
    job = FakeJob(tmp_path, [ev(100, "submitted", 1), ev(100, "finished", 2, state="FAILED")])
    down, up = "http://down/x", "http://up/x"

    def post(url, data, headers):
        if url == down:
            raise TimeoutError("no answer")
        job.posts.append((job.now, url, data))

    hooks = [Webhook(url=down, when=["FAILED"], retry_for="1m"), Webhook(url=up, when=["FAILED"])]
    Notifier(str(tmp_path), hooks, post=post, status=lambda: None, clock=lambda: job.now,
             sleep=job.sleep).run()
    assert [(t, url) for t, url, _ in job.posts] == [(100.0, up)]


def test_gives_up_after_retry_for_and_says_so(tmp_path):
    job = FakeJob(tmp_path, [ev(100, "submitted", 1), ev(101, "finished", 2, state="FAILED")])
    job.down_until = 10_000.0
    gave: list[str] = []
    notifier(tmp_path, job, [Webhook(url="http://a/x", when=["FAILED"], retry_for="90s")],
             gave_up=lambda d, e: gave.append(d.trigger)).run()
    assert gave == ["FAILED"] and job.posts == [] and 191 <= job.now <= 191 + MAX_RETRY_S + 1
    ledger = [json.loads(line)
              for line in (tmp_path / "notify" / "sent.jsonl").read_text().splitlines()]
    assert [entry["outcome"] for entry in ledger] == ["gave_up"]


def test_a_second_notifier_for_the_same_job_exits_at_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="fsdp_orch")
    (tmp_path / "notify").mkdir()
    fd = os.open(tmp_path / "notify" / "lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the first notifier
    try:
        assert notifier_main(str(tmp_path)) == 0  # no submission here: it would fail had it gone on
        assert "another notifier holds this job" in caplog.messages  # its log
    finally:
        os.close(fd)
