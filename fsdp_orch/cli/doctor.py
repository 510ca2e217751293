"""``fsdp-orch doctor [--cluster NAME]``: what a job on that cluster needs, each check with a fix.

The checks every cluster shares live here (this host's torch, where the index database lives); a
cluster kind adds its own through ``ClusterKind.doctor``. Commands go through one runner."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from fsdp_orch.backends.registry import cluster_kind, load_profile
from fsdp_orch.observe import command
from fsdp_orch.observe.command import Runner
from fsdp_orch.places.home import filesystem_of, home_dir, on_network_filesystem, store_path
from fsdp_orch.vocab.checks import TORCH_VERSION, Check


def torch_here(python: str = sys.executable, run: Runner = command.run) -> tuple[Check, str | None]:
    """Does this host's Python import torch? (the check, and the version)"""
    result = run([python, "-c", TORCH_VERSION], 120.0)
    version = result.stdout.strip() if result.returncode == 0 else None
    if version is None:
        return Check("torch on this host", False, f"{python} cannot import torch: "
                     f"{(result.stderr.strip().splitlines() or ['no output'])[-1]}",
                     "install the pinned torch in this environment (bash scripts/setup.sh)"), None
    return Check("torch on this host", True, f"{python}: torch {version}"), version


def home_checks(home: str | None = None, mounts: str | None = None) -> list[Check]:
    root = home or home_dir()
    fs = filesystem_of(root, mounts) or "unknown"
    db = store_path(root, mounts)
    if on_network_filesystem(root, mounts):
        return [Check("FSDP_ORCH_HOME", True, f"{root} is on {fs}, a network filesystem: the nodes can "
                      f"share its runs folder; the index database is kept locally at {db}")]
    return [Check("FSDP_ORCH_HOME", True, f"{root} is on {fs} (local); the index database is {db}",
                  "for a multi-host cluster, put FSDP_ORCH_HOME on the filesystem the nodes share")]


def report(checks: list[Check], as_json: bool) -> str:
    if as_json:
        return json.dumps({"ok": all(c.ok for c in checks), "checks": [asdict(c) for c in checks]}, indent=2)
    lines = []
    for c in checks:
        lines.append(f"[{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}")
        if c.fix and not c.ok:
            lines.append(f"       fix: {c.fix}")
    return "\n".join(lines)


def run_doctor(cluster: str | None, as_json: bool, run: Runner = command.run) -> tuple[str, bool]:
    """(the report, whether every check passed)."""
    check, version = torch_here(run=run)
    checks = [check, *home_checks()]
    if cluster is not None:
        profile, _ = load_profile(cluster)
        checks += cluster_kind(profile.kind).doctor(profile, version, run)
    return report(checks, as_json), all(c.ok for c in checks)


__all__ = ["Check", "home_checks", "report", "run_doctor", "torch_here"]
