"""Every retried call to an outside system goes through tenacity with the caller's sleep and clock:
here each site's sleep records the delays (and a manual clock moves by them), so nothing waits and
no network, gcloud, sshd or SLURM is needed."""

from __future__ import annotations

import errno
import io
import json
import random
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace

import pytest

from fsdp_orch.backends.over_ssh.connect import HostRefused, HostUnreachable, connect, refused
from fsdp_orch.backends.over_ssh.reports import HostReports, StreamSilent
from fsdp_orch.backends.over_ssh.sftp_storage import SftpStorage
from fsdp_orch.backends.slurm.kind import query, steps_gone
from fsdp_orch.backends.tpu_vm.kind import TpuVmProfile
from fsdp_orch.backends.tpu_vm.lifecycle import TpuVm
from fsdp_orch.decide.policy import backoff_delay
from fsdp_orch.jobspec.notify import Webhook
from fsdp_orch.jobspec.schema import RestartPolicy
from fsdp_orch.notify.delivery import Notifier
from fsdp_orch.observe.command import CommandResult
from fsdp_orch.record.events import EventWriter
from fsdp_orch.vocab.backoff import WEBHOOK, Retries, TriedByTheCaller, retrying
from fsdp_orch.vocab.errors import CommandError, FsdpOrchError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


class ManualClock:
    """A clock that moves only when something sleeps on it; the sleeps are recorded."""

    def __init__(self, now: float = 0.0):
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


# --- the factory itself -------------------------------------------------------------------------

def test_the_factory_waits_through_the_injected_sleep_and_gives_up_after_its_tries() -> None:
    slept: list[float] = []
    calls: list[int] = []

    def refuses() -> None:
        calls.append(1)
        raise ConnectionRefusedError("down")

    again = retrying(Retries(first=1.0, most=4.0, tries=5), sleep=slept.append,
                     transient=lambda e: isinstance(e, ConnectionRefusedError))
    with pytest.raises(ConnectionRefusedError, match="down"):
        again(refuses)
    assert len(calls) == 5 and slept == [1.0, 2.0, 4.0, 4.0]


def test_a_deadline_is_read_on_the_injected_clock() -> None:
    clock = ManualClock(now=10.0)
    answers = iter(["no", "no", "no", "no", "no", "yes"])
    again = retrying(Retries(first=1.0, most=30.0), sleep=clock.sleep, not_yet=lambda a: a == "no",
                     deadline=15.0, clock=clock)
    assert again(lambda: next(answers)) == "no"  # the last answer, once the deadline came
    assert clock.slept == [1.0, 2.0, 4.0] and clock.now == 17.0


def test_the_restart_policy_takes_its_exponential_from_tenacity() -> None:
    policy = RestartPolicy.model_validate({"backoff": {"initial": "10s", "max": "300s",
                                                       "multiplier": 2, "jitter": 0}})
    assert [backoff_delay(policy, n, random.Random(0)) for n in (1, 2, 3, 6, 7, 10_000)] == \
        [10.0, 20.0, 40.0, 300.0, 300.0, 300.0]


# --- 1. webhook delivery ------------------------------------------------------------------------

def test_webhook_delivery_backs_off_from_1s_doubling_to_30s_until_retry_for(tmp_path: Path) -> None:
    writer = EventWriter(tmp_path, "submit")
    writer.append("submitted", at=100.0)
    writer.append("finished", at=100.0, state="FAILED")
    clock = ManualClock(now=100.0)
    tries: list[float] = []
    gave_up: list[str] = []

    def down(url: str, data: bytes, headers: dict[str, str]) -> None:
        tries.append(clock.now)
        raise ConnectionRefusedError("down")

    hook = Webhook(url="http://a/x", when=["FAILED"], retry_for="2m")
    Notifier(str(tmp_path), [hook], post=down, status=lambda: None, clock=clock, sleep=clock.sleep,
             gave_up=lambda due, error: gave_up.append(error)).run()
    assert [b - a for a, b in pairwise(tries)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert tries[-1] == 221.0 and gave_up == ["ConnectionRefusedError: down"]  # 221 - 100 >= 120 s
    ledger = [json.loads(line)
              for line in (tmp_path / "notify" / "sent.jsonl").read_text().splitlines()]
    assert ledger == [{"key": ledger[0]["key"], "outcome": "gave_up", "at": 221.0, "tries": 9}]
    assert set(clock.slept) == {0.5}  # the notifier's loop polls; tenacity only said when to try


def test_a_webhook_queue_is_told_when_to_try_again_without_being_blocked() -> None:
    clock = ManualClock(now=0.0)
    retries = TriedByTheCaller(WEBHOOK, deadline=60.0, clock=clock)
    waits = []
    while (wait := retries.failed(TimeoutError("no answer"))) is not None:
        waits.append(wait)
        clock.now += wait
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0] and clock.now == 61.0
    assert TriedByTheCaller(WEBHOOK, transient=lambda e: False).failed(ValueError("bad")) is None


# --- 2. the TPU VM READY wait -------------------------------------------------------------------

READY = (FIXTURES / "tpu" / "describe-ready-v4-32.json").read_text()
CREATING = json.dumps({**json.loads(READY), "state": "CREATING", "networkEndpoints": []})


def tpu_profile() -> TpuVmProfile:
    return TpuVmProfile.model_validate({
        "kind": "tpu-vm", "tpu_name": "fsdp-orch-v4", "zone": "us-central2-b",
        "project": "my-gcp-project",
        "accelerator_type": "v4-32", "runtime_version": "tpu-ubuntu2204-base", "num_workers": 4,
        "owns_vm": False, "ready_timeout": 120})


def describes(*outputs: str):  # type: ignore[no-untyped-def]
    left = list(outputs)
    calls: list[list[str]] = []

    def gcloud(argv: list[str], timeout: float) -> CommandResult:
        calls.append(argv)
        assert argv[4] == "describe", argv
        return CommandResult(0, left.pop(0), "")
    gcloud.calls = calls  # type: ignore[attr-defined]
    return gcloud


def test_the_tpu_ready_wait_backs_off_from_2s_doubling_to_30s() -> None:
    clock = ManualClock()
    gcloud = describes(*[CREATING] * 7, READY)
    vm = TpuVm(tpu_profile(), runner=gcloud, clock=clock, sleep=clock.sleep).ready(lambda m: None)
    assert vm.state == "READY" and len(gcloud.calls) == 8
    assert clock.slept == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_the_tpu_ready_wait_gives_up_at_ready_timeout_naming_the_last_state() -> None:
    clock = ManualClock()
    gcloud = describes(*[CREATING] * 20)
    with pytest.raises(FsdpOrchError, match=r"is CREATING after waiting ready_timeout \(120s\)"):
        TpuVm(tpu_profile(), runner=gcloud, clock=clock, sleep=clock.sleep).ready(lambda m: None)
    assert clock.slept == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0] and clock.now == 120.0
    assert len(gcloud.calls) == 8


# --- 3. SSH connect and the report streams' reconnect ------------------------------------------

HOST = SimpleNamespace(address="10.0.0.7", port=22, user="me", identity_file=None)


def test_an_ssh_connect_refused_twice_is_tried_again_and_then_connects() -> None:
    slept: list[float] = []
    tries: list[int] = []
    opened = object()

    def open_once(host: object, profile: object) -> object:
        tries.append(1)
        if len(tries) <= 2:
            raise HostRefused("host me@10.0.0.7:22 is unreachable: Connection refused")
        return opened

    assert connect(HOST, None, open_once=open_once, sleep=slept.append) is opened
    assert len(tries) == 3 and slept == [1.0, 2.0]


def test_an_ssh_host_that_keeps_refusing_or_does_not_answer_is_given_up() -> None:
    slept: list[float] = []
    tries: list[str] = []

    def refuses(host: object, profile: object) -> object:
        tries.append("refused")
        raise HostRefused(f"refused {len(tries)}")

    with pytest.raises(HostRefused, match="refused 3"):
        connect(HOST, None, open_once=refuses, sleep=slept.append)
    assert tries == ["refused"] * 3 and slept == [1.0, 2.0]

    def silent(host: object, profile: object) -> object:
        tries.append("silent")
        raise HostUnreachable("did not answer within connect_timeout (10s)")

    tries.clear()
    slept.clear()
    with pytest.raises(HostUnreachable, match="connect_timeout"):
        connect(HOST, None, open_once=silent, sleep=slept.append)
    # a host that does not answer is lost, not waited for
    assert tries == ["silent"] and slept == []


def test_a_connection_refused_on_every_address_is_worth_another_try() -> None:
    from paramiko.ssh_exception import NoValidConnectionsError

    def on_each_address(*errors: OSError) -> NoValidConnectionsError:
        return NoValidConnectionsError({(f"10.0.0.{i}", 22): e for i, e in enumerate(errors)})

    refusal = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    assert refused(on_each_address(refusal, ConnectionResetError(errno.ECONNRESET, "reset")))
    assert refused(refusal)
    assert not refused(on_each_address(refusal, OSError(errno.EHOSTUNREACH, "No route to host")))
    assert not refused(TimeoutError("timed out"))


class ScriptedReports(HostReports):
    """A report stream whose ``_stream`` follows a script instead of an SSH channel."""

    def __init__(self, tmp_path: Path, script: list[BaseException | str]):
        super().__init__(host=HOST, profile=None, job_id="j1", attempt=0, rank=1, pgid=9,
                         node_timeout=30.0, local_run_dir=tmp_path)
        self.script = script
        self.streams = 0
        self.slept: list[float] = []
        self._halt.wait = self.record  # type: ignore[method-assign]

    def record(self, seconds: float | None = None) -> bool:
        self.slept.append(float(seconds or 0))
        return False

    def _stream(self) -> None:
        self.streams += 1
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        if step == "exit":
            self._mirror({"exit": 0})


def test_a_silent_report_stream_is_opened_again_until_the_node_ends(tmp_path: Path) -> None:
    reports = ScriptedReports(tmp_path, [StreamSilent(), EOFError(), "killed", "exit"])
    reports.run()
    assert reports.streams == 4 and reports.slept == [0.5, 0.5, 0.5]
    assert reports.ended.is_set() and reports.lost is None
    assert (tmp_path / "attempt-0" / "exit-node-1").read_text() == "0\n"


def test_a_host_that_stops_answering_a_new_connection_is_lost(tmp_path: Path) -> None:
    reports = ScriptedReports(tmp_path, [StreamSilent(), HostUnreachable("no answer")])
    reports.run()
    assert reports.streams == 2 and reports.slept == [0.5]
    assert reports.lost == "host me@10.0.0.7:22 (node 1) stopped answering: no answer"


# --- 4. sacct and squeue ------------------------------------------------------------------------

SACCT_LINE = ("41|fsdp-orch-abc|COMPLETED|0:0|2024-01-01T00:00:00|2024-01-01T00:00:01|2024-01-"
              "01T00:01:00|node1\n")
DB_DOWN = "sacct: error: Problem talking to the database: Connection refused"


class ScriptedSlurm:
    def __init__(self, *answers: CommandResult):
        self.answers = list(answers)
        self.argvs: list[list[str]] = []

    def __call__(self, argv: list[str], timeout: float = 60.0) -> CommandResult:
        self.argvs.append(argv)
        return self.answers.pop(0)


def test_an_sacct_call_that_fails_once_is_made_again_and_read() -> None:
    sacct = ScriptedSlurm(CommandResult(1, "", DB_DOWN), CommandResult(0, SACCT_LINE, ""))
    slept: list[float] = []
    records = query(["41"], runner=sacct, sleep=slept.append)
    assert records["41"].state == "COMPLETED" and records["41"].ours == "abc"
    assert (len(sacct.argvs) == 2 and sacct.argvs[0] == sacct.argvs[1]
            and sacct.argvs[0][0] == "sacct")
    assert slept == [1.0]


def test_an_sacct_that_keeps_failing_raises_its_error_after_three_tries() -> None:
    sacct = ScriptedSlurm(*[CommandResult(1, "", DB_DOWN)] * 3)
    slept: list[float] = []
    with pytest.raises(CommandError, match="Problem talking to the database") as raised:
        query(["41"], runner=sacct, sleep=slept.append)
    assert raised.value.returncode == 1 and len(sacct.argvs) == 3 and slept == [1.0, 2.0]


@pytest.mark.parametrize("answer", [CommandResult(127, "", "No such file or directory"),
                                    CommandResult(124, "", "timed out after 60s")])
def test_a_missing_sacct_or_one_that_timed_out_is_not_tried_again(answer: CommandResult) -> None:
    sacct = ScriptedSlurm(answer)
    slept: list[float] = []
    with pytest.raises(CommandError):
        query(["41"], runner=sacct, sleep=slept.append)
    assert len(sacct.argvs) == 1 and slept == []


def test_after_scancel_squeue_is_asked_until_the_steps_are_gone() -> None:
    clock = ManualClock()
    squeue = ScriptedSlurm(CommandResult(0, "41.0 fsdp-orch-attempt-0\n", ""),
                           CommandResult(1, "", "slurm_load_jobs error: Unable to contact "
                                                "slurm controller"),
                           CommandResult(0, "41.0 fsdp-orch-attempt-0\n", ""),
                           CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified"))
    assert steps_gone("41", runner=squeue, clock=clock, sleep=clock.sleep) is True
    # the failed call: SLURM_QUERY's wait
    assert len(squeue.argvs) == 4 and clock.slept == [0.5, 1.0, 0.5]

    clock = ManualClock()
    always = ScriptedSlurm(*[CommandResult(0, "41.0 fsdp-orch-attempt-0\n", "")] * 200)
    assert steps_gone("41", within=5.0, runner=always, clock=clock, sleep=clock.sleep) is False
    assert clock.slept == [0.5] * 10 and clock.now == 5.0


# --- 5. SFTP reads ------------------------------------------------------------------------------

class FakeSftp:
    def __init__(self, files: dict[str, bytes], broken: list[BaseException]):
        self.files, self.broken = files, broken

    def open(self, path: str, mode: str) -> io.BytesIO:
        if self.broken:
            raise self.broken.pop(0)
        if path not in self.files:
            raise FileNotFoundError(errno.ENOENT, "No such file", path)
        return io.BytesIO(self.files[path])


class FakeConnection:
    def __init__(self, sftp: FakeSftp):
        self._sftp, self.closed = sftp, False

    def sftp(self) -> FakeSftp:
        return self._sftp

    def close(self) -> None:
        self.closed = True


def storage(files: dict[str, bytes], broken: list[BaseException]):  # type: ignore[no-untyped-def]
    sftp = FakeSftp(files, broken)
    opened: list[FakeConnection] = []
    slept: list[float] = []

    def connect_to(host: object, profile: object) -> FakeConnection:
        opened.append(FakeConnection(sftp))
        return opened[-1]
    return SftpStorage(HOST, None, connect_to=connect_to, sleep=slept.append), opened, slept


def test_an_sftp_read_that_fails_once_opens_the_connection_again_and_reads() -> None:
    files = {"/w/ckpt/step-10/COMMITTED": b"step 10\n"}
    store, opened, slept = storage(files, [OSError(errno.ECONNRESET, "Connection reset by peer")])
    assert store.read_text("/w/ckpt/step-10/COMMITTED") == "step 10\n"
    assert len(opened) == 2 and opened[0].closed and not opened[1].closed and slept == [1.0]


def test_an_sftp_read_that_fails_twice_raises_and_a_missing_file_is_no_failure() -> None:
    store, opened, slept = storage({}, [EOFError(), EOFError()])
    with pytest.raises(EOFError):
        store.read_text("/w/x")
    assert len(opened) == 2 and slept == [1.0]

    store, opened, slept = storage({}, [])
    assert store.read_text("/w/missing") is None and len(opened) == 1 and slept == []

    store, opened, slept = storage({}, [PermissionError(errno.EACCES, "Permission denied")])
    with pytest.raises(PermissionError):
        store.read_text("/w/x")
    assert len(opened) == 1 and slept == []  # not a broken link: not tried again


def test_an_sftp_range_read_reads_from_the_offset() -> None:
    """A pickle's step and a safetensors header are read from a file's start (a FAKE sftp)."""
    store, _, _ = storage({"/w/out/ckpt.pt": b"abcdefgh"}, [])
    assert store.read_range("/w/out/ckpt.pt", 2, 3) == b"cde"
    assert store.read_range("/w/out/gone.pt", 0, 8) is None
