"""``notify:`` webhooks with a real HTTP receiver on 127.0.0.1 and real local jobs: one POST per
configured state change; a receiver that is down delays nothing and gets its POSTs once back."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytestmark = pytest.mark.slow


class Receiver:
    """Records each POST's JSON body."""

    def __init__(self, port: int = 0):
        self.bodies: list[dict] = []
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                data = self.rfile.read(int(self.headers["Content-Length"]))
                received.append(json.loads(data))
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


def job_with_hook(tmp_path, name: str, command: list[str], port: int, on: list[str], extra: str = "") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nlauncher: python\ncommand: {json.dumps(command)}\n{extra}"
                    f"notify:\n  - url: http://127.0.0.1:{port}/hook\n    when: {json.dumps(on)}\n"
                    f"    retry_for: 2m\n")
    return str(path)


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_one_post_per_configured_state_change(cli, tmp_path):
    receiver = Receiver()
    try:
        job = job_with_hook(tmp_path, "ok", ["sleep", "1"], receiver.port, ["RUNNING", "SUCCEEDED"])
        job_id = json.loads(cli.run("submit", "--cluster", "local", job, "--wait", "--json", check=True).stdout)["id"]
        assert wait_for(lambda: len(receiver.bodies) >= 2, 30), receiver.bodies
        time.sleep(2)  # nothing more comes
        assert receiver.triggers() == ["RUNNING", "SUCCEEDED"]
        assert all(b["id"] == job_id for b in receiver.bodies)
        assert receiver.bodies[1]["state"] == "SUCCEEDED"  # the status JSON, as `status --json` prints it
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
    up = Receiver()
    try:
        job = job_with_hook(tmp_path, "timed", ["sleep", "1"], up.port, ["RUNNING", "SUCCEEDED"])
        started = time.monotonic()
        cli.run("submit", "--cluster", "local", job, "--wait", check=True)
        with_receiver = time.monotonic() - started
    finally:
        up.close()

    port = free_port()  # nothing listens there yet
    job = job_with_hook(tmp_path, "down", ["sleep", "1"], port, ["RUNNING", "SUCCEEDED"])
    started = time.monotonic()
    job_id = json.loads(cli.run("submit", "--cluster", "local", job, "--wait", "--json", check=True).stdout)["id"]
    without = time.monotonic() - started
    assert without < with_receiver + 5, (without, with_receiver)  # the job did not wait for its webhook
    receiver = Receiver(port)
    try:
        assert wait_for(lambda: len(receiver.bodies) >= 2, 60), receiver.bodies  # backoff tops out at 30 s
        time.sleep(2)
        assert receiver.triggers() == ["RUNNING", "SUCCEEDED"]  # once each, in order
        assert all(b["id"] == job_id for b in receiver.bodies)
    finally:
        receiver.close()
