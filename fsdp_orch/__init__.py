"""fsdp-orch: run multi-node PyTorch FSDP jobs on real clusters and keep them alive.

Kept import-free on purpose: the CLI must start fast on a login node.
"""

__version__ = "0.1.0"
