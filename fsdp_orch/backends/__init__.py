"""Backends by cluster kind. Each lives in its own module and is imported only when used."""

from __future__ import annotations

from typing import Any

from fsdp_orch.errors import InputError

_MODULES = {"local": "fsdp_orch.backends.local", "slurm": "fsdp_orch.backends.slurm"}


def backend_for_kind(kind: str) -> Any:
    module_name = _MODULES.get(kind)
    if module_name is None:
        raise InputError(f"submitting to a {kind} cluster is not implemented yet; "
                         f"'fsdp-orch render --cluster ...' shows what would run", field="--cluster")
    import importlib

    return importlib.import_module(module_name).BACKEND
