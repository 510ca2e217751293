"""``notify:`` webhooks with a real HTTP receiver on 127.0.0.1 and real local jobs: one POST per
configured state change; a receiver that is down delays nothing and gets its POSTs once back."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


class Receiver:
    """Records each POST's JSON body."""

    def __init__(self, port: int = 0):
        self.bodies: list[dict] = []
        self.paths: list[str] = []
        self.content_types: list[str] = []
        received, paths, content_types = self.bodies, self.paths, self.content_types

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                data = self.rfile.read(int(self.headers["Content-Length"]))
                received.append(json.loads(data))
                paths.append(self.path)
                content_types.append(self.headers["Content-Type"])
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def triggers(self) -> list[str]:
        return [b["notification"]["trigger"] for b in self.bodies]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_with_hook(tmp_path, name: str, command: list[str], port: int, on: list[str],
                  retry_for: str = "2m") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nlauncher: python\ncommand: {json.dumps(command)}\n"
                    f"notify:\n  - url: http://127.0.0.1:{port}/hook\n    when: {json.dumps(on)}\n"
                    f"    retry_for: {retry_for}\n")
    return str(path)


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_the_demo_job_posts_once_per_configured_state_change(cli, demo, tmp_path):
    receiver = Receiver()
    try:
        hook = (f"notify=[{{url: 'http://127.0.0.1:{receiver.port}/hook', on: [RUNNING, "
                f"SUCCEEDED], retry_for: 60s}}]")
        job_id = json.loads(cli.run("submit", "--cluster", "local", str(demo), "--set", hook,
                                    "--set", "args=[--steps, 20, --seq-len, 16]", "--set",
                                    "checkpoint.interval=10",
                                    "--wait", "--json", check=True).stdout)["id"]
        assert wait_for(lambda: len(receiver.bodies) >= 2, 30), receiver.bodies
        time.sleep(2)  # nothing more comes
        assert receiver.triggers() == ["RUNNING", "SUCCEEDED"]
        assert [b["notification"]["state"] for b in receiver.bodies] == ["RUNNING", "SUCCEEDED"]
        assert all(b["id"] == job_id and b["notification"]["job"] == job_id
                   for b in receiver.bodies)
        assert receiver.bodies[1] == {
            **cli.status(job_id), "notification": receiver.bodies[1]["notification"]}
        assert (receiver.paths == ["/hook", "/hook"]
                and set(receiver.content_types) == {"application/json"})
    finally:
        receiver.close()


def test_a_failing_job_is_posted_once_as_failed_by_its_clusters_webhook(cli, tmp_path):
    receiver = Receiver()
    try:
        profile = tmp_path / "notifying.yaml"  # the hook is the cluster's, for every job sent there
        profile.write_text(f"kind: local\nnotify:\n  - url: http://127.0.0.1:{receiver.port}/hook\n"
                           "    when: [FAILED]\n")
        job = tmp_path / "bad.yaml"
        job.write_text("name: bad\nlauncher: python\ncommand: ['false']\n"
                       "restart: {max_restarts: 1, backoff: {initial: 1s, max: 1s, jitter: 0s}}\n")
        proc = cli.run("submit", "--cluster", str(profile), str(job), "--wait", "--json")
        assert proc.returncode == 1, proc.stderr
        assert wait_for(lambda: len(receiver.bodies) >= 1, 30)
        time.sleep(2)
        assert receiver.triggers() == ["FAILED"] and receiver.bodies[0]["state"] == "FAILED"
    finally:
        receiver.close()


def test_a_receiver_that_is_down_delays_nothing_and_gets_the_posts_once_back(cli, tmp_path):
    plain = tmp_path / "plain.yaml"  # the same job without notify: the time to beat
    plain.write_text("name: plain\nlauncher: python\ncommand: [sleep, '1']\n")
    started = time.monotonic()
    cli.run("submit", "--cluster", "local", str(plain), "--wait", check=True)
    without_notify = time.monotonic() - started

    port = free_port()  # nothing listens there yet
    job = job_with_hook(tmp_path, "down", ["sleep", "1"], port, ["RUNNING", "SUCCEEDED"])
    started = time.monotonic()
    job_id = json.loads(cli.run("submit", "--cluster", "local", job, "--wait", "--json",
                                check=True).stdout)["id"]
    receiver_down = time.monotonic() - started
    # it did not wait for its webhook
    assert receiver_down < without_notify + 5, (receiver_down, without_notify)
    assert cli.status(job_id)["state"] == "SUCCEEDED"
    receiver = Receiver(port)
    try:
        # backoff tops out at 30 s
        assert wait_for(lambda: len(receiver.bodies) >= 2, 60), receiver.bodies
        time.sleep(2)
        assert receiver.triggers() == ["RUNNING", "SUCCEEDED"]  # once each, in order
        assert all(b["id"] == job_id for b in receiver.bodies)
    finally:
        receiver.close()


def test_a_receiver_that_never_answers_is_given_up_after_retry_for_and_the_job_says_so(
        cli, tmp_path):
    job = job_with_hook(tmp_path, "unheard", ["true"], free_port(), ["SUCCEEDED"], retry_for="3s")
    job_id = json.loads(cli.run("submit", "--cluster", "local", job, "--wait", "--json",
                                check=True).stdout)["id"]

    def notices() -> list[dict]:
        lines = cli.run("events", job_id, "--json", check=True).stdout.splitlines()
        return [e for e in map(json.loads, lines) if e.get("notice") == "notify_gave_up"]

    assert wait_for(lambda: notices(), 30), cli.run("events", job_id).stdout
    assert len(notices()) == 1 and "SUCCEEDED" in notices()[0]["message"]
    run_dir = cli.status(job_id)["run_dir"]
    ledger = (Path(run_dir) / "notify" / "sent.jsonl").read_text().splitlines()
    assert [json.loads(line)["outcome"] for line in ledger] == ["gave_up"]
