"""Issue 66's two speed targets on the test cluster (``tests/k8s/cluster.sh``), in one run:

- the cluster's start, its binaries built (``--restart-cluster``: ``cluster.sh stop`` then
  ``start``, timed; target: within 60 s);
- ``submit`` to the ranks' first step: the demo on 2 pods of 1 rank (host network, gloo), from
  just before ``fsdp-orch submit`` to the ``first_step`` event's time (target: within 15 s), against
  the same demo on the local kind (1 node of 2 ranks) submitted the same way in the same run: the
  ratio is what the kind adds (the pods, the images' containers, the CPU limit of each pod).

Run as root, with the cluster running (``eval "$(tests/k8s/cluster.sh start)"``) or with
``--restart-cluster``. Prints each run's figures, the medians and the ratio.

    .venv/bin/python bench/k8s_first_step.py [--runs 3] [--restart-cluster]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "k8s"), str(REPO / "tests")]  # its conftest first

from cli_harness import SMALL_DEMO, copy_demo, make_cli  # noqa: E402
from conftest import LOCAL_IMAGE, python_host_paths  # noqa: E402
from k8s_jobs import TWO_PODS, write_profile  # noqa: E402

CLUSTER_SH = REPO / "tests" / "k8s" / "cluster.sh"
DEMO = ["--set", "args=" + json.dumps(["--steps", "3", *SMALL_DEMO])]
TARGET_FIRST_STEP_S, TARGET_START_S = 15.0, 60.0


def restart_cluster() -> float:
    subprocess.run(["bash", str(CLUSTER_SH), "stop"], check=True, capture_output=True)
    t0 = time.monotonic()
    subprocess.run(["bash", str(CLUSTER_SH), "start"], check=True, capture_output=True)
    return time.monotonic() - t0


def first_step_s(cli, job_yaml: Path, cluster: str, *extra: str) -> float:  # type: ignore[no-untyped-def]
    """From just before submit to the first step of attempt 0 (its event's own time)."""
    t0 = time.time()
    proc = cli.run("submit", "--cluster", cluster, str(job_yaml), *extra, *DEMO)
    if proc.returncode != 0:
        raise SystemExit(f"submit failed: {proc.stderr}")
    job_id = proc.stdout.strip().splitlines()[-1]
    final = cli.wait_until(job_id, lambda s: s["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"),
                           timeout=300, what="the end")
    if final["state"] != "SUCCEEDED":
        raise SystemExit(f"job {job_id} ended {final['state']}: {final.get('reason')}")
    events = [json.loads(line) for line in
              cli.run("events", job_id, "--json", check=True).stdout.splitlines()]
    [first] = [e["first_step_at"] for e in events if e["kind"] == "first_step"]
    return float(first) - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--restart-cluster", action="store_true")
    args = parser.parse_args()
    if args.restart_cluster:
        start = restart_cluster()
        print(f"cluster start (binaries built): {start:.1f} s (target {TARGET_START_S:g} s)")
    kubeconfig = Path(os.environ.get("FSDP_ORCH_K8S_DIR", "/tmp/fsdp-orch-k8s")) / "kubeconfig"
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    namespace = f"fsdp-orch-bench-{os.getpid()}"
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        while not core.list_namespaced_service_account(namespace).items:
            time.sleep(0.2)
        cluster = SimpleNamespace(kubeconfig=kubeconfig, namespace=namespace, image=LOCAL_IMAGE,
                                  python=sys.executable, host_paths=python_host_paths())
        k8s, local = [], []
        with tempfile.TemporaryDirectory(prefix="fsdp-orch-bench-") as tmp:
            for n in range(args.runs):
                base = Path(tmp) / f"run{n}"
                cli = make_cli(base)
                write_profile(cli, cluster, base)
                local.append(first_step_s(cli, copy_demo(base / "local"), "local",
                                          "--set", "nodes=1", "--set", "procs_per_node=2"))
                k8s.append(first_step_s(cli, copy_demo(base), "k8s", *TWO_PODS))
                print(f"run {n + 1}: submit to first step: kubernetes {k8s[-1]:.1f} s, "
                      f"local {local[-1]:.1f} s")
    finally:
        core.delete_namespace(namespace, grace_period_seconds=0)
    k, lo = statistics.median(k8s), statistics.median(local)
    print(f"median submit to first step: kubernetes {k:.1f} s (max {max(k8s):.1f}; target "
          f"{TARGET_FIRST_STEP_S:g} s), local {lo:.1f} s; ratio {k / lo:.2f}")


if __name__ == "__main__":
    main()
