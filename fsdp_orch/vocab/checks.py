"""One line of ``fsdp-orch doctor``: what was checked, whether it holds, and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


# What a Python prints when it imports torch: its version.
TORCH_VERSION = "import torch; print(torch.__version__)"
