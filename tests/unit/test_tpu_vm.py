"""The TPU VM kind's pure parts and its gcloud driving, with a scripted runner standing in for
gcloud (no Google Cloud here): render for a v4-32, describe's JSON, what each state leads to, and
the order of the calls that bring a preempted TPU VM back."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_orch.backends.tpu_vm.gcloud import (
    NOT_FOUND,
    TpuVmState,
    next_action,
    parse_describe,
    prepare_argv,
)
from fsdp_orch.backends.tpu_vm.kind import TpuVmProfile
from fsdp_orch.backends.tpu_vm.lifecycle import TpuVm
from fsdp_orch.observe.command import CommandResult
from fsdp_orch.vocab.errors import FsdpOrchError

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "tpu"
READY = (FIXTURES / "describe-ready-v4-32.json").read_text()
PREEMPTED = (FIXTURES / "describe-preempted-v4-32.json").read_text()
MISSING = ("ERROR: (gcloud.compute.tpus.tpu-vm.describe) NOT_FOUND: Resource "
           "'projects/my-gcp-project/locations/us-central2-b/nodes/fsdp-orch-v4' was not found")


def profile(**changes: object) -> TpuVmProfile:
    fields = {"kind": "tpu-vm", "tpu_name": "fsdp-orch-v4", "zone": "us-central2-b",
              "project": "my-gcp-project",
              "accelerator_type": "v4-32", "runtime_version": "tpu-ubuntu2204-base", "spot": True,
              "num_workers": 4,
              "owns_vm": True, "ready_timeout": 60, "prepare": ["pip install -q 'torch_xla[tpu]'"]}
    return TpuVmProfile.model_validate({**fields, **changes})


def test_render_for_a_v4_32_shows_the_gcloud_commands_and_the_pjrt_worker_command(tmp_path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "fsdp_orch", "render", "--cluster", "tpu-vm",
                           str(REPO / "examples" / "demo" / "job.yaml"), "--set", "launcher=xla",
                           "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    scripts = {p.name: p.read_text() for p in out.rglob("*.sh")}
    assert sorted(scripts) == [
        "node-0.sh", "node-1.sh", "node-2.sh", "node-3.sh", "tpu-vm.sh"], (sorted(scripts))
    gcloud = scripts["tpu-vm.sh"]
    for words in (["describe", "fsdp-orch-v4", "--zone=us-central2-b", "--project=my-gcp-project",
                   "--format=json"],
                  ["create", "fsdp-orch-v4", "--accelerator-type=v4-32",
                   "--version=tpu-ubuntu2204-base", "--spot"],
                  ["delete", "fsdp-orch-v4", "--quiet"], ["ssh", "fsdp-orch-v4", "--worker=all"]):
        line = next(line for line in gcloud.splitlines() if f"tpu-vm {words[0]} " in line)
        assert set(words) <= set(shlex.split(line.partition(")")[2].rstrip(" ;"))), line
    for rank in range(4):
        node = scripts[f"node-{rank}.sh"]
        assert ("export PJRT_DEVICE=TPU" in node and f"NODE_RANK={rank}" in node
                and "WORLD_SIZE=4" in node)
        assert node.rstrip().splitlines()[-1].startswith("exec python3 -u train.py"), node[-300:]
    for path in out.rglob("*.sh"):
        check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, (path.name, check.stderr)


def test_describe_json_is_read_as_the_api_has_it() -> None:
    vm = parse_describe("fsdp-orch-v4", READY)
    assert (vm.state, vm.health, vm.accelerator_type, vm.spot) == (
        "READY", "HEALTHY", "v4-32", True)
    assert vm.addresses("internal") == ("10.128.0.21", "10.128.0.22", "10.128.0.23", "10.128.0.24")
    assert vm.addresses("external")[0] == "34.122.10.11" and vm.vm_id == "5409381756322145627"
    gone = parse_describe("fsdp-orch-v4", PREEMPTED)
    assert (gone.state, gone.addresses("internal"), gone.spot) == ("PREEMPTED", (), True)
    assert gone.summary() == "TPU VM fsdp-orch-v4 is PREEMPTED"
    sick = parse_describe("x", json.dumps({"state": "READY", "health": "UNHEALTHY_MAINTENANCE",
                                           "healthDescription": "The TPU had a maintenance event"}))
    assert sick.summary() == (
        "TPU VM x is READY (health UNHEALTHY_MAINTENANCE: The TPU had a maintenance event)")
    with pytest.raises(ValueError, match="no JSON"):
        parse_describe("x", "Listed 0 items.")


@pytest.mark.parametrize(("state", "owns", "action"), [
    ("READY", False, "use"), ("CREATING", True, "wait"), ("REPAIRING", False, "wait"),
    ("DELETING", True, "wait"),
    ("PREEMPTED", True, "delete"), ("TERMINATED", True, "delete"), ("PREEMPTED", False, "wait"),
    (NOT_FOUND, True, "create"), (NOT_FOUND, False, "fail"), ("STOPPED", True, "fail"),
    ("SOMETHING_NEW", True, "wait"),
])
def test_what_each_state_leads_to(state: str, owns: bool, action: str) -> None:
    assert next_action(TpuVmState(name="t", state=state), owns_vm=owns)[0] == action


class ScriptedGcloud:
    """Answers the gcloud calls in order from a script of (verb, returncode, stdout, stderr);
    records every argv. A stand-in for the real CLI, which needs a Google Cloud project."""

    def __init__(self, *answers: tuple[str, int, str, str]):
        self.answers = list(answers)
        self.argvs: list[list[str]] = []

    def __call__(self, argv: list[str], timeout: float) -> CommandResult:
        self.argvs.append(argv)
        verb, code, out, err = self.answers.pop(0)
        assert argv[:4] == ["gcloud", "compute", "tpus", "tpu-vm"] and argv[4] == verb, (argv, verb)
        return CommandResult(code, out, err)

    @property
    def verbs(self) -> list[str]:
        return [argv[4] for argv in self.argvs]


def test_a_preempted_tpu_vm_it_owns_is_deleted_created_and_waited_for() -> None:
    creating = json.dumps({**json.loads(READY), "state": "CREATING", "networkEndpoints": []})
    gcloud = ScriptedGcloud(("describe", 0, PREEMPTED, ""), ("delete", 0, "", ""),
                            ("describe", 1, "", MISSING),
                            ("create", 0, "", ""), ("describe", 0, creating, ""),
                            ("describe", 0, creating, ""),
                            ("describe", 0, READY, ""), ("ssh", 0, "", ""))
    said, slept = [], []
    vm = TpuVm(profile(), runner=gcloud, clock=lambda: 0.0, sleep=slept.append)
    ready = vm.ready(said.append)
    vm.prepare()
    assert gcloud.verbs == [
        "describe", "delete", "describe", "create", "describe", "describe", "describe", "ssh"]
    assert ready.addresses("internal")[3] == "10.128.0.24" and slept == [2.0, 4.0]
    assert said == ["TPU VM fsdp-orch-v4 is PREEMPTED: deleting it, to create it again",
                    "TPU VM fsdp-orch-v4 deleted",
                    "TPU VM fsdp-orch-v4 does not exist: creating it",
                    "TPU VM fsdp-orch-v4 created (v4-32, tpu-ubuntu2204-base, spot)",
                    "TPU VM fsdp-orch-v4 is CREATING: waiting"]
    assert gcloud.argvs[-1] == prepare_argv(profile())
    assert gcloud.argvs[-1][-1] == (
        "--command=set -e; mkdir -p -- /var/tmp/fsdp-orch; pip install -q 'torch_xla[tpu]'")


def test_a_tpu_vm_it_does_not_own_is_waited_for_and_never_deleted() -> None:
    now = [0.0]
    gcloud = ScriptedGcloud(*[("describe", 0, PREEMPTED, "")] * 6)

    def sleep(seconds: float) -> None:
        now[0] += seconds
    with pytest.raises(FsdpOrchError, match=r"is PREEMPTED after waiting ready_timeout \(60s\)"):
        TpuVm(profile(owns_vm=False), runner=gcloud, clock=lambda: now[0],
              sleep=sleep).ready(lambda m: None)
    assert set(gcloud.verbs) == {"describe"} and now[0] >= 60
    with pytest.raises(FsdpOrchError, match="set owns_vm: true"):
        TpuVm(profile(owns_vm=False),
              runner=ScriptedGcloud(("describe", 1, "", MISSING))).ready(lambda m: None)


def test_gcloud_errors_say_what_is_wrong() -> None:
    with pytest.raises(FsdpOrchError, match="gcloud is not on PATH"):
        TpuVm(profile(), runner=ScriptedGcloud(("describe", 127, "", "No such file"))).describe()
    denied = ("ERROR: (gcloud.compute.tpus.tpu-vm.describe) PERMISSION_DENIED: Permission "
              "'tpu.nodes.get' denied")
    with pytest.raises(FsdpOrchError, match="PERMISSION_DENIED"):
        TpuVm(profile(), runner=ScriptedGcloud(("describe", 1, "", denied))).describe()
    with pytest.raises(FsdpOrchError, match="num_workers: 2"):
        TpuVm(profile(num_workers=2),
              runner=ScriptedGcloud(("describe", 0, READY, ""))).ready(lambda m: None)


@pytest.mark.parametrize(("line", "field", "expected"), [
    ("remote_workdir: work\n", "remote_workdir", "expected an absolute folder"),
    ("tpu_name: 'my tpu; rm -rf'\n", "tpu_name", "should match pattern"),
    ("pjrt_device: GPU\n", "pjrt_device", "'TPU' or 'CPU'"),
])
def test_a_bad_tpu_profile_is_one_error_naming_the_field(tmp_path, line: str, field: str,
                                                         expected: str) -> None:
    base = (REPO / "clusters" / "tpu-vm.yaml").read_text()
    key = line.split(":")[0] + ":"
    text = "".join(kept for kept in base.splitlines(True) if not kept.startswith(key)) + line
    (tmp_path / "clusters").mkdir()
    (tmp_path / "clusters" / "bad.yaml").write_text(text)
    proc = subprocess.run([sys.executable, "-m", "fsdp_orch", "render", "--cluster", "bad",
                           str(REPO / "examples" / "demo" / "job.yaml"), "--set", "launcher=xla"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert ("bad.yaml:" in proc.stderr and field in proc.stderr
            and expected in proc.stderr), (proc.stderr)
