"""The version of fsdp-orch: the one place it is written
(the package face and pyproject read it)."""

__version__ = "0.1.0"
