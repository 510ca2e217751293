"""A sustained flood at the node channel (issue 61): another account opens ``--rate`` connections a
minute (100,000 by default) for ``--seconds`` against a running demo's node channel, each one
closed at once or after a line of junk, none saying the token. In one run:

- the baseline: the supervisor's RSS and open files while the job trains before the flood;
- under the flood: their largest values (sampled every 0.2 s), the connections the other account
  made and how many the supervisor counted as refused (its notices);
- after: the job's end (it must be SUCCEEDED in its first attempt, nothing judged).

Run as root (it makes the second account, as the tests do).

    .venv/bin/python bench/channel_flood.py [--rate 100000] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import secret_checks  # noqa: E402

from fsdp_orch.record.store import Store  # noqa: E402

FLOODER = r"""
import socket, sys, time
host, port, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
made = failed = 0
start = time.monotonic()
while (now := time.monotonic()) - start < seconds:
    due = int((now - start) * rate)
    while made + failed < due:
        try:
            s = socket.create_connection((host, port), timeout=2)
            if (made % 2):
                s.sendall(b'{"hello": "not the token"}\n')
            s.close()
            made += 1
        except OSError:
            failed += 1
    time.sleep(0.002)
print(made, failed)
"""


def cli(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
    env["FSDP_ORCH_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "fsdp_orch", *args], env=env, check=check,
                          capture_output=True, text=True)


def status(home: Path, job_id: str) -> dict:  # type: ignore[type-arg]
    return json.loads(cli(home, "status", "--json", job_id).stdout)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100_000, help="connections a minute")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--flooders", type=int, default=4, help="processes of the other account")
    args = parser.parse_args()
    uid, gid = secret_checks.other_account()
    root = Path(tempfile.mkdtemp(prefix="fsdp-orch-flood-"))
    home = root / "home"
    shutil.copytree(REPO / "examples" / "demo", root / "demo",
                    ignore=shutil.ignore_patterns("checkpoints", "__pycache__"))
    steps = int((args.seconds + 60) / 0.1)
    job_id = cli(home, "submit", "--cluster", "local", str(root / "demo" / "job.yaml"), "--set",
                 f"args=[--steps, {steps}, --sleep-per-step, '0.1']").stdout.strip()
    try:
        while (status(home, job_id).get("progress") or {}).get("step", 0) < 5:
            time.sleep(0.5)
        run_dir = Path(status(home, job_id)["run_dir"])
        endpoint = json.loads((run_dir / "attempt-0" / "agent.json").read_text())
        supervisor = Store(home / "jobs.db").job(job_id).supervisor_pid
        assert supervisor is not None
        base_rss, base_fds = rss_mb(supervisor), open_files(supervisor)
        per = args.rate / 60 / args.flooders
        flooders = [subprocess.Popen(secret_checks.as_account(uid, gid, [
            "/usr/bin/python3", "-c", FLOODER, str(endpoint["host"]), str(endpoint["port"]),
            str(per), str(args.seconds)]), stdout=subprocess.PIPE, text=True)
            for _ in range(args.flooders)]
        most_rss, most_fds = base_rss, base_fds
        while any(f.poll() is None for f in flooders):
            most_rss = max(most_rss, rss_mb(supervisor))
            most_fds = max(most_fds, open_files(supervisor))
            time.sleep(0.2)
        counts = [tuple(map(int, f.stdout.read().split())) for f in flooders]  # type: ignore[union-attr]
        made, failed = sum(c[0] for c in counts), sum(c[1] for c in counts)
        after_rss, after_fds = rss_mb(supervisor), open_files(supervisor)
        while (final := status(home, job_id))["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
            time.sleep(1)
        refused = max([int(e["message"].split()[0]) for e in final["events"]
                       if e["kind"] == "refused_connections"] or [0])
        ok = (final["state"] == "SUCCEEDED" and final["attempts"] == 1 and not final["failures"]
              and made >= 0.9 * args.rate * args.seconds / 60)
        print(f"flood: {made} connections made ({made / args.seconds * 60:,.0f} a minute), "
              f"{failed} refused at connect, over {args.seconds:g} s by {args.flooders} processes")
        print(f"supervisor RSS: {base_rss:.1f} MB before, at most {most_rss:.1f} "
              f"(x{most_rss / base_rss:.2f}), {after_rss:.1f} after")
        print(f"supervisor open files: {base_fds} before, at most {most_fds} "
              f"(x{most_fds / base_fds:.2f}), {after_fds} after")
        print(f"refused connections counted in the notices: {refused}")
        print(f"job: {final['state']} in {final['attempts']} attempt(s), "
              f"failures {[f['category'] for f in final['failures']]}")
        print("target (>= 90% of the rate made, SUCCEEDED in 1 attempt, nothing judged):",
              "met" if ok else "MISSED")
        return 0 if ok else 1
    finally:
        cli(home, "cancel", job_id, check=False)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
