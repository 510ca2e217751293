"""Secrets by reference, checked end to end (issue 24, part 3), shared by the local, SSH and SLURM
tests: a job whose ``env.HF_TOKEN`` comes ``{from_env: TEST_HF_TOKEN}``, whose ``WANDB_API_KEY`` is
a plain value, and whose webhook's ``Authorization`` header comes ``{from_file: PATH}`` (0600).

The ranks check their environment against SHA-256 digests (so the job SUCCEEDED only if every rank
saw every value); a real HTTP receiver records the header; a second, unprivileged account greps
every folder the job wrote and finds no value; the owner, once the job and its notifier are done,
finds neither referenced value in any file and the plain one only in files no one else can read;
``status``, ``events``, ``logs`` and ``render`` print no value."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cli_harness import Cli

USERADD_NAME_IN_USE = 9  # useradd(8)
OTHER = "fsdporchtest"  # the second account (as in tests/integration/test_shared_scratch.py)
ENV_NAME = "TEST_HF_TOKEN"  # where `submit` takes HF_TOKEN from

# Runs on every rank, under the job's launcher: compares its environment with the digests the job
# passes as plain values, and never prints a value.
CHECK_SCRIPT = '''\
"""Exit 3 unless HF_TOKEN and WANDB_API_KEY hold the values whose SHA-256 the job passed."""
import hashlib
import os
import sys

rank = os.environ.get("RANK", "?")
wrong = [name for name in ("HF_TOKEN", "WANDB_API_KEY")
         if name not in os.environ
         or hashlib.sha256(os.environ[name].encode()).hexdigest() != \
os.environ.get("EXPECT_" + name + "_SHA256")]
if wrong:
    print(f"rank {rank}: wrong or missing {', '.join(wrong)}", flush=True)
    sys.exit(3)
print(f"rank {rank}: secrets ok", flush=True)
'''

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run_here(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@dataclass(frozen=True)
class Place:
    """A folder the job wrote into (or one holding such folders), and how to run a command, as
    root, where it is seen: here, inside a login node's mount namespace, or on an SSH host."""

    path: str
    label: str
    run: Runner = run_here


# --- the second account -------------------------------------------------------------------------

def other_account(name: str = OTHER) -> tuple[int, int]:
    """(uid, gid) of the unprivileged second account (or another one named ``name``, as the victim
    of a test where root's powers would hide the attack), created when absent. Needs root: a skip
    elsewhere, a failure under CI."""
    if os.geteuid() != 0:
        reason = "needs root to create and act as a second account (useradd, setpriv)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"under CI the second-account tests must run: {reason}")
        pytest.skip(reason)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        made = subprocess.run(["useradd", "--system", "--no-create-home", name],
                              capture_output=True, text=True)
        # 9: another pytest worker made it first
        if made.returncode not in (0, USERADD_NAME_IN_USE):
            raise AssertionError(
                f"useradd {name} exited {made.returncode}: {made.stderr}") from None
        entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid


def as_account(uid: int, gid: int, argv: Sequence[str]) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv]


# --- the values ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Secrets:
    hf_token: str  # referenced: from_env TEST_HF_TOKEN
    wandb: str  # plain, in job.yaml
    auth_token: str  # referenced: the Authorization header is "Bearer <auth_token>", from a file
    auth_file: Path

    @property
    def authorization(self) -> str:
        return f"Bearer {self.auth_token}"

    @property
    def referenced(self) -> tuple[str, str]:
        return self.hf_token, self.auth_token

    @property
    def all(self) -> tuple[str, str, str]:
        return self.hf_token, self.wandb, self.auth_token


def make_secrets(private: Path) -> Secrets:
    """Fresh random values; the auth file (0600, content plus one newline) in ``private``, a folder
    outside every folder that is grepped."""
    private.mkdir(parents=True, exist_ok=True)
    auth_token = "auth" + secrets.token_hex(20)
    auth_file = private / "webhook-auth"
    fd = os.open(auth_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"Bearer {auth_token}\n")
    os.chmod(auth_file, 0o600)
    return Secrets(hf_token="hf" + secrets.token_hex(20), wandb="wandb" + secrets.token_hex(20),
                   auth_token=auth_token, auth_file=auth_file)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def submit_env(cli: Cli, values: Secrets) -> dict[str, str]:
    """The CLI's environment with TEST_HF_TOKEN set: what `submit` resolves from_env against."""
    return {**cli.env, ENV_NAME: values.hf_token}


# --- the job ------------------------------------------------------------------------------------

def write_job(folder: Path, values: Secrets, port: int, nodes: int) -> Path:
    """The job folder: check_secrets.py and job.yaml (0600: it holds the plain WANDB value).
    torchrun, one process per node, no restarts; the webhook on SUCCEEDED and FAILED."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "check_secrets.py").write_text(CHECK_SCRIPT)
    text = f"""\
name: secrets
script: check_secrets.py
launcher: torchrun
nodes: {nodes}
procs_per_node: 1
env:
  HF_TOKEN: {{from_env: {ENV_NAME}}}
  WANDB_API_KEY: {values.wandb}
  EXPECT_HF_TOKEN_SHA256: "{sha256(values.hf_token)}"
  EXPECT_WANDB_API_KEY_SHA256: "{sha256(values.wandb)}"
  OMP_NUM_THREADS: "1"
restart:
  max_restarts: 0
watch:
  startup_timeout: 120s
  expect_ranks: false           # check_secrets.py starts no process group: it only reads its \
environment
notify:
  - url: http://127.0.0.1:{port}/hook
    on: [SUCCEEDED, FAILED]
    retry_for: 60s
    headers:
      Authorization: {{from_file: {json.dumps(str(values.auth_file))}}}
"""
    job = folder / "job.yaml"
    fd = os.open(job, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(job, 0o600)
    return job


@contextmanager
def reachable_base(prefix: str) -> Iterator[Path]:
    """A folder in /tmp that every account may enter and list (0755), like the parent of a home or
    of a scratch on a shared machine, so the second account's grep meets fsdp-orch's own modes and
    nothing else. Holds ``canary.txt`` (0644): the second account's grep must find it."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def scratch_in(base: Path) -> Path:
    """A shared_dir every account can write (1777), like /scratch."""
    path = base / "shared"
    path.mkdir(exist_ok=True)
    path.chmod(0o1777)
    return path


# --- the webhook receiver -----------------------------------------------------------------------

@dataclass
class Post:
    path: str
    headers: dict[str, str]
    body: str


@dataclass
class Receiver:
    """A real HTTP server on 127.0.0.1 that records every POST (path, headers, body)."""

    posts: list[Post] = field(default_factory=list)

    def __post_init__(self) -> None:
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(
                    int(self.headers.get("Content-Length") or 0)).decode(errors="replace")
                posts.append(Post(self.path, {k: v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def triggers(self) -> list[str]:
        found = []
        for post in self.posts:
            try:
                found.append(json.loads(post.body)["notification"]["trigger"])
            except (ValueError, KeyError, TypeError):
                found.append("?")
        return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def receiver() -> Iterator[Receiver]:
    got = Receiver()
    try:
        yield got
    finally:
        got.close()


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


# --- the checks ---------------------------------------------------------------------------------

def submit_and_wait(cli: Cli, job: Path, cluster: str, values: Secrets,
                    timeout: float = 400) -> dict:
    """``submit --wait --json`` with TEST_HF_TOKEN in the environment; the final status."""
    proc = cli.run("submit", "--cluster", cluster, "--wait", "--json", str(job),
                   env=submit_env(cli, values), timeout=timeout)
    assert proc.stdout.strip(), (f"submit exited {proc.returncode}\nstdout: {proc.stdout}\nstderr: "
                                 f"{proc.stderr}")
    for value in values.all:
        assert value not in proc.stdout + proc.stderr, "submit printed a secret value"
    return json.loads(proc.stdout)


def check_ranks_saw_every_value(cli: Cli, status: dict, nodes: int) -> None:
    logs = cli.run("logs", status["id"], check=True).stdout
    assert status["state"] == "SUCCEEDED", f"{status}\nlogs:\n{logs[-3000:]}"
    assert logs.count("secrets ok") >= nodes, logs[-3000:]
    assert "wrong or missing" not in logs, logs[-3000:]


def check_webhook_got_the_header(got: Receiver, values: Secrets) -> None:
    assert wait_for(lambda: "SUCCEEDED" in got.triggers(), 90), (
        f"no SUCCEEDED POST: {got.triggers()}")
    for post in got.posts:
        assert post.path == "/hook"
        assert post.headers.get("Authorization") == values.authorization, (
            "the Authorization header is not the file's content")
        for value in values.all:
            assert value not in post.body, "a webhook body holds a secret value"


def files_in(place: Place, folder: str) -> list[str]:
    """The regular files under ``folder`` (none when it does not exist)."""
    proc = place.run(["find", folder, "-type", "f"])
    return proc.stdout.split()


def wait_until_secrets_are_gone(home: Place, timeout: float = 120) -> None:
    """$FSDP_ORCH_HOME/secrets holds no file once the job has ended and its notifier is done; the
    folder, where it is left, is 0700."""
    folder = f"{home.path}/secrets"
    assert wait_for(lambda: files_in(home, folder) == [], timeout), \
        f"secrets files still there {timeout}s after the job ended: {files_in(home, folder)}"
    mode = home.run(["stat", "-c", "%a", folder])
    if mode.returncode == 0:
        assert mode.stdout.strip() == "700", f"{folder} has mode {mode.stdout.strip()}"


def redacted_values(document: Any, key: str) -> list[Any]:
    """Every value stored under ``key`` anywhere in ``document``, looking into strings that hold
    JSON objects too (an event's spec_json)."""
    found: list[Any] = []
    if isinstance(document, dict):
        for name, value in document.items():
            if name == key:
                found.append(value)
            found += redacted_values(value, key)
    elif isinstance(document, list):
        for value in document:
            found += redacted_values(value, key)
    elif isinstance(document, str) and document.lstrip().startswith(("{", "[")):
        try:
            found += redacted_values(json.loads(document), key)
        except ValueError:
            pass
    return found


def check_displays_show_no_value(cli: Cli, job_id: str, job: Path, cluster: str,
                                 values: Secrets) -> None:
    """status (table, one job, --json), events (lines, --json), logs and render print no value;
    events --json shows the plain WANDB_API_KEY as ***; render says where HF_TOKEN comes from."""
    shown = {
        "status": cli.run("status", "--all", check=True),
        "status ID": cli.run("status", job_id, check=True),
        "status --json": cli.run("status", "--json", check=True),
        "status ID --json": cli.run("status", job_id, "--json", check=True),
        "events ID": cli.run("events", job_id, check=True),
        "events ID --json": cli.run("events", job_id, "--json", check=True),
        "logs ID": cli.run("logs", job_id, check=True),
        "render": cli.run("render", str(job), "--cluster", cluster, env=submit_env(cli, values),
                          check=True),
    }
    for what, proc in shown.items():
        for value in values.all:
            assert value not in proc.stdout + proc.stderr, f"`{what}` printed a secret value"
    assert job_id in shown["status"].stdout
    assert ("from_env" in shown["render"].stdout
            and ENV_NAME in shown["render"].stdout), (shown["render"].stdout[-3000:])
    events = [json.loads(line)
              for line in shown["events ID --json"].stdout.splitlines() if line.strip()]
    wandb = redacted_values(events, "WANDB_API_KEY")
    assert wandb and all(v == "***" for v in wandb), f"events --json shows WANDB_API_KEY as {wandb}"


def grep(place: Place, patterns: Sequence[str],
         account: tuple[int, int] | None = None) -> list[str]:
    """The files under ``place`` holding any of ``patterns`` (fixed strings), as ``account``
    (default root). Devices, FIFOs and sockets are skipped; unreadable folders are not errors."""
    argv = ["grep", "-r", "-F", "-l", "-D", "skip", *(w for p in patterns for w in ("-e", p)),
            place.path]
    proc = place.run(as_account(*account, argv) if account else argv)
    assert proc.returncode in (
        0, 1, 2), (f"grep in {place.label} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout.splitlines()


def check_other_account_finds_nothing(places: Sequence[Place], account: tuple[int, int],
                                      values: Secrets) -> None:
    """As the second account: each place's canary is found (the grep ran, as that account, and read
    what it may), and no file holds any of the three values."""
    for place in places:
        who = place.run(as_account(*account, ["id", "-u"]))
        assert who.stdout.strip() == str(account[0]), (f"setpriv in {place.label}: {who.stdout} "
                                                       f"{who.stderr}")
        canary = "canary" + secrets.token_hex(8)
        place.run(["sh", "-c", 'printf %s "$1" > "$2" && chmod 644 "$2"', "sh", canary,
                   f"{place.path}/canary.txt"])
        try:
            assert grep(place, [canary], account) == [f"{place.path}/canary.txt"], \
                f"the second account's grep did not read {place.label}'s canary"
            found = grep(place, values.all, account)
            assert found == [], (f"the second account ({OTHER}) found secret values in "
                                 f"{place.label}: {found}")
        finally:
            place.run(["rm", "-f", f"{place.path}/canary.txt"])


def check_owner_finds_no_reference(places: Sequence[Place], values: Secrets) -> None:
    """As the owner, after the end: no file anywhere holds a referenced value, and the files that
    hold the plain WANDB value are readable by their owner only."""
    for place in places:
        found = grep(place, values.referenced)
        assert found == [], ("a referenced value (HF_TOKEN or Authorization) is written in "
                             f"{place.label}: {found}")
        holding = grep(place, [values.wandb])
        if holding:
            modes = place.run(["stat", "-c", "%a %n", *holding]).stdout.splitlines()
            open_to_others = [line for line in modes if int(line.split(" ", 1)[0], 8) & 0o077]
            assert open_to_others == [], ("the plain WANDB value is in files others may read: "
                                          f"{open_to_others}")


@dataclass
class SecretJob:
    """One run of the job on ``cluster`` and everything to check afterwards."""

    cli: Cli
    cluster: str
    job: Path
    values: Secrets
    receiver: Receiver
    nodes: int
    home: Place  # FSDP_ORCH_HOME, where it is seen
    places: list[Place]  # every folder to grep (each holding what the job wrote there)
    account: tuple[int, int]

    def run_and_check(self) -> dict:
        status = submit_and_wait(self.cli, self.job, self.cluster, self.values)
        check_ranks_saw_every_value(self.cli, status, self.nodes)
        check_webhook_got_the_header(self.receiver, self.values)
        wait_until_secrets_are_gone(self.home)
        check_displays_show_no_value(self.cli, status["id"], self.job, self.cluster, self.values)
        check_other_account_finds_nothing(self.places, self.account, self.values)
        check_owner_finds_no_reference(self.places, self.values)
        return status
