"""FAKE gcloud: a stand-in for the Google Cloud CLI's `compute tpus tpu-vm` commands, for tests
only.

No TPU and no Google Cloud can be reached from the test machine, so this answers in their place.
Only the cloud API is fake; the workers are real: the SSH test hosts (tests/ssh/hosts.sh, network
namespaces with their own sshd and disk).

- ``describe NAME --zone=Z [--project=P] --format=json``: the TPU VM as JSON in the shape of the
  TPU API's Node (name, acceleratorType, state, health, id, networkEndpoints[].ipAddress and
  .accessConfig.externalIp, schedulingConfig, runtimeVersion ...), or gcloud's NOT_FOUND error.
  A VM just created answers CREATING to its first ``creating_describes`` describes, then READY.
- ``create NAME ... --accelerator-type=T --version=V [--spot]``: a new VM (new id) on the pool's
  workers, each a fresh machine: every process of the host is killed and its sshd started again with
  an empty disk (``hosts.sh restart``). ALREADY_EXISTS when one of the name exists (a PREEMPTED one
  too).
- ``delete NAME ... --quiet``: the VM is gone.
- ``ssh NAME ... --worker=all --command=CMD``: CMD on every worker for real, with the OpenSSH client
  and the hosts' key, at once; exits non-zero when one fails.

State: the JSON file named by ``$FAKE_GCLOUD_STATE`` (see ``new_state``). Every call is appended to
its ``calls`` file, one JSON line each, so a test can check the order. ``preempt`` is what a test
calls to have Google take a spot VM away: every process on its workers dies and ``describe`` says
PREEMPTED.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HOSTS_SH = Path(__file__).resolve().parents[1] / "ssh" / "hosts.sh"


def new_state(path: Path, *, workers: list[dict[str, Any]], ssh: dict[str, str], ssh_dir: str,
              project: str = "fake-project", creating_describes: int = 1) -> Path:
    """Write a fake's state: ``workers`` [{address, host (1-based hosts.sh number), namespace}] make
    up every VM it creates; ``ssh`` {user, key, known_hosts} reach them. No VM exists yet."""
    path.write_text(json.dumps({"project": project, "workers": workers, "ssh": ssh,
                                "ssh_dir": ssh_dir,
                                "creating_describes": creating_describes,
                                "calls": str(path.with_suffix(".calls")), "vms": {}}))
    return path


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[dict[str, Any]]:
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.loads(path.read_text())
        yield state
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(path)


def calls(path: Path) -> list[dict[str, Any]]:
    """Every call so far, in order: {verb, name, args}."""
    file = Path(json.loads(path.read_text())["calls"])
    return [json.loads(line) for line in file.read_text().splitlines()] if file.exists() else []


# How long the killed processes of a worker may take to be gone. kill -9 returns at once; an sshd
# still exiting holds port 22, and the new one then fails to bind it ("Address already in use":
# a create that failed in a full run on 2 busy cores). 120 s: many times what a loaded machine took.
GONE_WITHIN_S = 120.0


def _namespace_pids(namespace: str) -> list[str]:
    return subprocess.run(["ip", "netns", "pids", namespace], capture_output=True,
                          text=True).stdout.split()


def _kill_everything_on(worker: dict[str, Any]) -> None:
    """Every process of the worker killed, and gone: as a machine that is deleted or preempted.
    Listed again on each pass, so that a process forked after a listing is killed too."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while (pids := _namespace_pids(worker["namespace"])) and time.monotonic() < deadline:
        subprocess.run(["kill", "-9", *pids], check=False, capture_output=True)
        time.sleep(0.05)


def _new_machine(worker: dict[str, Any], ssh_dir: str) -> str:
    """The worker as a fresh machine: its processes killed, its sshd started again on an empty
    disk. Returns why it could not be, or "". A restart that fails is tried once more: the stand's
    own hiccup (a test host's sshd slow to start on busy cores), which a real cloud's create never
    shows the caller, must not read as the cloud refusing machines."""
    why = ""
    for tries_left in (1, 0):
        _kill_everything_on(worker)
        restarted = subprocess.run(
            ["bash", str(HOSTS_SH), "restart", str(worker["host"])], capture_output=True,
            text=True, env={**os.environ, "FSDP_ORCH_SSH_DIR": ssh_dir}, timeout=300)
        if restarted.returncode == 0:
            return ""
        reasons = [line for line in restarted.stderr.splitlines() if "error:" in line]
        why = (f"FAKE gcloud: hosts.sh restart {worker['host']} exited {restarted.returncode}: "
               f"{' | '.join(reasons) or restarted.stderr[-2000:]}")
        if tries_left:
            print(f"{why}; trying once more", file=sys.stderr)
    return why


def preempt(path: Path, name: str) -> None:
    """Google takes the spot VM ``name`` away: its workers' processes die, describe says
    PREEMPTED."""
    with _locked(path) as state:
        vm = state["vms"][name]
        vm["state"] = "PREEMPTED"
        for worker in state["workers"]:
            _kill_everything_on(worker)


def _node(state: dict[str, Any], name: str, zone: str) -> dict[str, Any]:
    vm = state["vms"][name]
    node = {
        "acceleratorConfig": {"topology": vm["topology"], "type": "V4"},
        "acceleratorType": vm["acceleratorType"],
        "apiVersion": "V2",
        "cidrBlock": "10.77.0.0/24",
        "createTime": vm["createTime"],
        "id": vm["id"],
        "name": f"projects/{state['project']}/locations/{zone}/nodes/{name}",
        "networkConfig": {"enableExternalIps": True,
                          "network": f"projects/{state['project']}/global/networks/default",
                          "subnetwork": f"projects/{state['project']}/regions/{zone[:-2]}/"
                                        "subnetworks/default"},
        "networkEndpoints": [{"accessConfig": {"externalIp": w["address"]},
                              "ipAddress": w["address"], "port": 8470}
                             for w in state["workers"]],
        "runtimeVersion": vm["runtimeVersion"],
        "schedulingConfig": {"spot": True} if vm["spot"] else {},
        "serviceAccount": {"email": "default",
                           "scope": ["https://www.googleapis.com/auth/cloud-platform"]},
        "shieldedInstanceConfig": {},
        "state": vm["state"],
    }
    if vm["state"] == "READY":
        node["health"] = "HEALTHY"
    return node


def _flags(args: list[str]) -> tuple[list[str], dict[str, str]]:
    positional, flags = [], {}
    for arg in args:
        if arg.startswith("--"):
            key, _, value = arg[2:].partition("=")
            flags[key] = value
        else:
            positional.append(arg)
    return positional, flags


def _fail(message: str) -> int:
    print(message, file=sys.stderr)
    return 1


def _ssh_all(state: dict[str, Any], command: str) -> int:
    ssh = state["ssh"]

    def on(worker: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ssh", "-F", "/dev/null", "-i", ssh["key"],
                               "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                               "-o", "StrictHostKeyChecking=yes",
                               "-o", f"UserKnownHostsFile={ssh['known_hosts']}",
                               "-o", "GlobalKnownHostsFile=/dev/null", "-o", "ConnectTimeout=5",
                               "-l", ssh["user"], worker["address"], command],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=600)
    with ThreadPoolExecutor(len(state["workers"])) as pool:
        results = list(pool.map(on, state["workers"]))
    code = 0
    for i, result in enumerate(results):
        sys.stdout.write("".join(f"[worker {i}] {line}\n" for line in result.stdout.splitlines()))
        sys.stderr.write(result.stderr)
        code = code or result.returncode
    return code


def main(argv: list[str]) -> int:
    path = Path(os.environ["FAKE_GCLOUD_STATE"])
    if argv[:3] != ["compute", "tpus", "tpu-vm"] or len(argv) < 5:
        return _fail("FAKE gcloud: only `compute tpus tpu-vm describe|create|delete|ssh NAME` "
                     f"here, not {argv}")
    verb, (positional, flags) = argv[3], _flags(argv[4:])
    name, zone = positional[0], flags.get("zone", "")
    where = f"projects/{flags.get('project', 'fake-project')}/locations/{zone}/nodes/{name}"
    with open(json.loads(path.read_text())["calls"], "a") as log:
        log.write(json.dumps({"verb": verb, "name": name, "args": argv[4:]}) + "\n")
    with _locked(path) as state:
        vm = state["vms"].get(name)
        if verb == "describe":
            if vm is None:
                return _fail("ERROR: (gcloud.compute.tpus.tpu-vm.describe) NOT_FOUND: Resource "
                             f"'{where}' was not found")
            if vm["state"] == "CREATING":
                vm["describes_left"] -= 1
                if vm["describes_left"] < 0:
                    vm["state"] = "READY"
            print(json.dumps(_node(state, name, zone), indent=2, sort_keys=True))
            return 0
        if verb == "delete":
            if vm is None:
                return _fail("ERROR: (gcloud.compute.tpus.tpu-vm.delete) NOT_FOUND: Resource "
                             f"'{where}' was not found")
            del state["vms"][name]
            return 0
        if verb == "create":
            if vm is not None:
                return _fail("ERROR: (gcloud.compute.tpus.tpu-vm.create) ALREADY_EXISTS: Resource "
                             f"'{where}' already exists")
            # a new machine: nothing of the old one runs, an empty disk
            for worker in state["workers"]:
                failed = _new_machine(worker, state["ssh_dir"])
                if failed:
                    return _fail(failed)
            chips = int(flags["accelerator-type"].rpartition("-")[2]) // 2
            state["vms"][name] = {"state": "CREATING",
                                  "describes_left": state["creating_describes"],
                                  "id": str(random.randrange(10**18, 10**19)),
                                  "acceleratorType": flags["accelerator-type"],
                                  "runtimeVersion": flags["version"],
                                  "spot": "spot" in flags, "topology": f"2x2x{max(1, chips // 4)}",
                                  "createTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z",
                                                              time.gmtime())}
            return 0
        if verb == "ssh":
            if vm is None or vm["state"] != "READY":
                return _fail(f"ERROR: (gcloud.compute.tpus.tpu-vm.ssh) TPU VM {name} is not READY")
            if flags.get("worker") != "all":
                return _fail("FAKE gcloud: only --worker=all here")
    return (_ssh_all(state, flags["command"]) if verb == "ssh"
            else _fail(f"FAKE gcloud: no verb {verb!r}"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
