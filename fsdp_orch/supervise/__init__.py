"""Supervision: watching attempts, classifying failures, deciding restarts."""

from __future__ import annotations

from fsdp_orch.places.builtin import SUPERVISOR_MODULE, supervisor_command

__all__ = ["SUPERVISOR_MODULE", "supervisor_command"]
