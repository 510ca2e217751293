"""One module per command, imported only when it is named (or for ``--help``). Each gives ``HELP``
(its line in ``fsdp-orch --help``), ``add_arguments(parser)`` and ``run(args) -> exit status``;
``USES_HOME`` when it reads or writes $FSDP_ORCH_HOME (which must then be the caller's own)."""

from __future__ import annotations

import importlib
from types import ModuleType

# In the order ``fsdp-orch --help`` lists them.
NAMES = ("render", "submit", "fit", "status", "logs", "events", "report", "metrics", "cancel",
         "diagnose", "doctor", "clusters", "schedule", "scheduler", "schema")


def command(name: str) -> ModuleType:
    return importlib.import_module(f"fsdp_orch.cli.commands.{name}")
