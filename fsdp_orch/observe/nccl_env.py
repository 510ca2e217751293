"""NCCL settings that make hangs debuggable: the flight recorder, dumped on a timeout into the
attempt's folder. Torch-free: the launch scripts export them for every script, the runtime applies
them too. Both the current (``TORCH_FR_*``) and the older (``TORCH_NCCL_*``) names are set, so
either torch reads them; a value the user set under either name wins."""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping

# Named for no backend: the same files hold NCCL's own dumps (a timeout on a GPU) and the
# bootstrap's answers on gloo.
FLIGHT_RECORDER_PREFIX = "flight_recorder_rank_"
# The names read: ours, and torch's default one (NCCL's, which runs before this one named them).
FLIGHT_RECORDER_PREFIXES = (FLIGHT_RECORDER_PREFIX, "nccl_trace_rank_")
_ALIASES = (("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE"),
            ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE"))


def nccl_env_defaults(attempt_dir: str | None) -> dict[str, str]:
    out = {
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    }
    if attempt_dir is not None:
        prefix = f"{attempt_dir.rstrip('/')}/{FLIGHT_RECORDER_PREFIX}"
        out["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = prefix
        out["TORCH_FR_DUMP_TEMP_FILE"] = prefix
    return out


def missing_defaults(defaults: dict[str, str], given: Iterable[str]) -> dict[str, str]:
    """The defaults the user has set under neither of their names."""
    names_given = set(given)
    out = {}
    for name, value in defaults.items():
        names = next((pair for pair in _ALIASES if name in pair), (name,))
        if not names_given.intersection(names):
            out[name] = value
    return out


def apply_env_defaults(defaults: dict[str, str], env: MutableMapping[str, str]) -> None:
    env.update(missing_defaults(defaults, env))


__all__ = ["FLIGHT_RECORDER_PREFIX", "FLIGHT_RECORDER_PREFIXES", "apply_env_defaults",
           "missing_defaults", "nccl_env_defaults"]
