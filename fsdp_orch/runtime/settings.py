"""What the runtime learns from its environment: the ``FSDP_ORCH_*`` variables and the job spec.

Under fsdp-orch, the launch script exports ``FSDP_ORCH_SPEC`` (job.json, the output of
``fsdp_orch.launch.plan.spec_json``) and the paths of this run. Under plain ``torchrun`` none is set
and the defaults apply: the spec's defaults (FULL_SHARD, ...), checkpoints in ``./checkpoints``,
attempt 0, no heartbeat files (there is no run directory to put them in) and no faults. Torch-free.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdp_orch.jobspec.checkpoint_policy import CheckpointPolicy
from fsdp_orch.jobspec.fsdp_options import FsdpOptions
from fsdp_orch.jobspec.schema import Watch
from fsdp_orch.vocab.save_interval import OBSERVED_MTBF_ENV

DEFAULT_CHECKPOINT_DIR = "checkpoints"


def _path(value: str | None) -> Path | None:
    return Path(os.path.expanduser(value)) if value else None


@dataclass(frozen=True)
class Settings:
    job_id: str | None
    job_name: str | None
    attempt: int
    run_dir: Path | None
    attempt_dir: Path | None
    checkpoint_dir: Path
    resume: str  # "auto", "never" or a path to a step-N directory
    node_rank: int | None
    fsdp: FsdpOptions
    checkpoint: CheckpointPolicy
    watch: Watch
    resolved: dict[str, Any] = field(default_factory=dict)  # job.json's _resolved block
    fault: str | None = None
    checkpoint_request: Path | None = None  # a file whose appearance asks for a checkpoint now
    # a warm start's checkpoint, used while the job has none of its own
    init_from: Path | None = None
    init_optimizer: bool = False
    # the job's time between failures as the supervisor observed it (FSDP_ORCH_OBSERVED_MTBF_S);
    # None before its first failure, or not under fsdp-orch
    observed_mtbf_s: float | None = None

    @property
    def under_fsdp_orch(self) -> bool:
        return self.run_dir is not None


def load_spec(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(job spec fields, _resolved) from job.json. Raises ValueError with the path on a bad file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"FSDP_ORCH_SPEC={path}: cannot read the job spec: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"FSDP_ORCH_SPEC={path}: expected a JSON object")
    resolved = data.pop("_resolved", None) or {}
    return data, resolved


def from_env(env: dict[str, str] | None = None) -> Settings:
    """Settings from ``env`` (default ``os.environ``). Environment variables win over job.json."""
    env = dict(os.environ if env is None else env)
    spec: dict[str, Any] = {}
    resolved: dict[str, Any] = {}
    spec_path = _path(env.get("FSDP_ORCH_SPEC"))
    if spec_path is not None:
        spec, resolved = load_spec(spec_path)
    try:
        fsdp = FsdpOptions.model_validate(spec.get("fsdp") or {})
        checkpoint = CheckpointPolicy.model_validate(spec.get("checkpoint") or {})
        watch = Watch.model_validate(spec.get("watch") or {})
    except ValueError as exc:
        raise ValueError(f"FSDP_ORCH_SPEC={spec_path}: {exc}") from None
    ckpt_dir = (env.get("FSDP_ORCH_CHECKPOINT_DIR") or resolved.get("checkpoint_dir")
                or checkpoint.dir or DEFAULT_CHECKPOINT_DIR)
    attempt_text = env.get("FSDP_ORCH_ATTEMPT", "0") or "0"
    try:
        attempt = int(attempt_text)
    except ValueError:
        raise ValueError(f"FSDP_ORCH_ATTEMPT: expected an integer, got {attempt_text!r}") from None
    node_rank = env.get("FSDP_ORCH_NODE_RANK")
    return Settings(
        job_id=env.get("FSDP_ORCH_JOB_ID") or resolved.get("job_id"),
        job_name=env.get("FSDP_ORCH_JOB_NAME") or spec.get("name"),
        attempt=attempt,
        run_dir=_path(env.get("FSDP_ORCH_RUN_DIR")),
        attempt_dir=_path(env.get("FSDP_ORCH_ATTEMPT_DIR")),
        checkpoint_dir=Path(os.path.expanduser(ckpt_dir)),
        resume=env.get("FSDP_ORCH_RESUME") or checkpoint.resume,
        node_rank=int(node_rank) if node_rank and node_rank.isdigit() else None,
        fsdp=fsdp, checkpoint=checkpoint, watch=watch, resolved=resolved,
        fault=env.get("FSDP_ORCH_FAULT") or None,
        checkpoint_request=_path(env.get("FSDP_ORCH_CHECKPOINT_REQUEST")),
        init_from=_path(env.get("FSDP_ORCH_INIT_FROM")),
        init_optimizer=env.get("FSDP_ORCH_INIT_OPTIMIZER") == "1",
        observed_mtbf_s=_seconds(env, OBSERVED_MTBF_ENV),
    )


def _seconds(env: dict[str, str], name: str) -> float | None:
    """A number of seconds above 0 from ``env[name]``; None when unset or empty."""
    text = (env.get(name) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{name}: expected a number of seconds above 0, got {text!r}")
    return value


__all__ = ["Settings", "from_env", "load_spec", "DEFAULT_CHECKPOINT_DIR"]
