"""fsdp-orch: run multi-node PyTorch FSDP jobs on real clusters and keep them alive.

Kept import-free on purpose: the CLI must start fast on a login node. The Python API
(``fsdp_orch.submit``, ``Job``, ``JobDoesNotFit``, ``WaitTimedOut``; see
``fsdp_orch.control.api``) is loaded on first use.
"""

from fsdp_orch.vocab.version import __version__ as __version__

_API = ("submit", "Job", "JobDoesNotFit", "WaitTimedOut")


def __getattr__(name: str) -> object:
    if name in _API:
        from fsdp_orch.control import api

        return getattr(api, name)
    raise AttributeError(f"module 'fsdp_orch' has no attribute {name!r}")
