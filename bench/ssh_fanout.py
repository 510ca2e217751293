"""How long does the SSH kind take to launch an attempt on 3 hosts, against 1 host, in the same run?

The hosts are the test hosts of ``tests/ssh/hosts.sh`` (network namespaces with their own sshd; the
bench brings them up when they are not). A launch is what the supervisor does for an attempt: write
the scripts, connect to every host and start its node script (the scripts here exit at once). Hosts
are started in parallel, so 3 hosts should cost little more than 1. Target: ratio under 1.5.

The baseline, timed in the same run: plain OpenSSH running ``true`` on 1 host, and on 3 hosts at
once. On one machine the three "hosts" share its cores (each login costs sshd, key exchange and the
user's shell there), so the baseline shows what the machine allows.

    .venv/bin/python bench/ssh_fanout.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def hosts_up() -> dict[str, str]:
    """The test hosts' exports (brings them up with 3 hosts unless ``status`` says they are up)."""
    script = REPO / "tests" / "ssh" / "hosts.sh"
    up = subprocess.run(["bash", str(script), "status"], capture_output=True).returncode == 0
    out = subprocess.run(["bash", str(script), *(["exports"] if up else ["up", "3"])],
                         capture_output=True, text=True, check=True).stdout
    env = {}
    for line in out.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export":
            name, value = words[1].split("=", 1)
            env[name] = value
    return env


def launch_seconds(work: Path, hosts: dict[str, str], count: int, repeat: int) -> list[float]:
    from fsdp_orch.backends.over_ssh.launcher import SshLauncher
    from fsdp_orch.backends.over_ssh.node_report import exit_file
    from fsdp_orch.control.planning import plan_job

    profile = work / f"ssh{count}.yaml"
    lines = ["kind: ssh", "device: cpu", "hosts:"]
    for address in hosts["FSDP_ORCH_SSH_HOSTS"].split()[:count]:
        lines.append(f"  - {{address: {address}, user: root, identity_file: "
                     f"{hosts['FSDP_ORCH_SSH_KEY']}}}")
    lines += [f"python: {sys.executable}", f"known_hosts: {hosts['FSDP_ORCH_SSH_KNOWN_HOSTS']}",
              "connect_timeout: 5"]
    profile.write_text("\n".join(lines) + "\n")
    job = work / "job.yaml"
    job.write_text("name: fanout\nlauncher: python\ncommand: [\"true\"]\n")
    samples = []
    for attempt in range(repeat):
        planned = plan_job(job, str(profile), overrides=[f"nodes={count}"], job_id=f"fan{count}",
                           attempt=attempt, home_dir=work / "home")
        plan, artifacts = planned.plan, planned.artifacts
        t0 = time.perf_counter()
        SshLauncher(planned.submission).launch(plan, artifacts)
        samples.append(time.perf_counter() - t0)
        deadline = time.monotonic() + 60
        while not all(Path(exit_file(plan.attempt_dir, r)).exists() for r in range(count)):
            if time.monotonic() > deadline:
                raise SystemExit(f"the node scripts of attempt {attempt} on {count} host(s) "
                                 "did not finish")
            time.sleep(0.05)
    return samples


def openssh_seconds(hosts: dict[str, str], count: int, repeat: int) -> list[float]:
    """``ssh host true`` on ``count`` hosts at once."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        procs = [subprocess.Popen(["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                                   "-o", f"UserKnownHostsFile={hosts['FSDP_ORCH_SSH_KNOWN_HOSTS']}",
                                   "-i", hosts["FSDP_ORCH_SSH_KEY"], f"root@{address}", "true"])
                 for address in hosts["FSDP_ORCH_SSH_HOSTS"].split()[:count]]
        for proc in procs:
            proc.wait()
        samples.append(time.perf_counter() - t0)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    hosts = hosts_up()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        launch_seconds(work, hosts, 1, 1)  # warm: imports, page cache, sshd's first fork
        one = launch_seconds(work, hosts, 1, args.repeat)
        three = launch_seconds(work, hosts, 3, args.repeat)
        base1 = openssh_seconds(hosts, 1, args.repeat)
        base3 = openssh_seconds(hosts, 3, args.repeat)
    m1, m3 = statistics.median(one), statistics.median(three)
    b1, b3 = statistics.median(base1), statistics.median(base3)
    print(f"launch on 1 host  (median of {args.repeat}): {m1 * 1000:7.1f} ms")
    print(f"launch on 3 hosts (median of {args.repeat}): {m3 * 1000:7.1f} ms")
    print(f"ratio 3 hosts / 1 host:            {m3 / m1:7.2f}   (target < 1.5)")
    print(f"baseline, OpenSSH `true` on 1 host / 3 at once: {b1 * 1000:.1f} ms / "
          f"{b3 * 1000:.1f} ms, ratio {b3 / b1:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
