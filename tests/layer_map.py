"""The layer map of fsdp_orch as code: every folder (and the package face) on a floor, lowest
first. A module imports its own folder and the folders of lower floors, never a higher one, lazy
imports inside functions included (tests/unit/test_import_graph.py checks every import against
FLOORS). The order is the one today's imports call for, each folder above every folder it imports;
between two folders that import neither way the order is a choice, and it says which of them may
come to import the other: fit above supervise (the supervisor never estimates), record above
jobspec (the job spec does not stand on what happened: see ALLOWED_UPWARD), report and prometheus
below launch (they draw a status, they plan nothing). docs/contributing-layout.md's floors are
written from this table by scripts/gen_layout.py: run it after changing it.

No two folders share a floor. The top floor is the package face: its two modules, ``__init__.py``
(named ``__init__`` here) and ``__main__.py``."""

from __future__ import annotations

from typing import NamedTuple


class Floor(NamedTuple):
    """One floor: its folders (or the face's top-level modules) and what it is for, in a phrase
    that fits the doc's sketch (59 columns)."""

    units: tuple[str, ...]
    role: str


FLOORS: tuple[Floor, ...] = (
    Floor(("vocab",), "one source for each word: states, categories, errors, times"),
    Floor(("places",), "where the files are and who may write them (stdlib only)"),
    Floor(("observe",), "reading what running ranks leave behind: heartbeats, stacks"),
    Floor(("nodeagent",), "the node agent between a node's ranks and the supervisor"),
    Floor(("bootstrap",), "what every rank's Python loads with no code change"),
    Floor(("standby",), "the warm standby: a keeper per node that forks the ranks"),
    Floor(("checkpoints",), "what a checkpoint is, torch-free: layouts, completeness"),
    Floor(("jobspec",), "the job and profile models, YAML with file:line, --set"),
    Floor(("record",), "what happened: events, fold -> JobStatus, the store"),
    Floor(("runtime",), "what training scripts import; torch at module level"),
    Floor(("report",), "the report page, pure: a job's status drawn"),
    Floor(("prometheus",), "jobs as Prometheus metrics, read from the index"),
    Floor(("launch",), "planning, pure: job + kind + attempt -> plan -> artifacts"),
    Floor(("backends",), "the cluster kinds behind base.py's protocols, their helpers"),
    Floor(("decide",), "every rule that decides, pure: hang, teardown, restart"),
    Floor(("supervise",), "watch an attempt to its end, act on the rules, restart"),
    Floor(("fit",), "will it fit: each GPU's peak memory, without a GPU"),
    Floor(("notify",), "webhook notifications: a detached notifier per job"),
    Floor(("control",), "submit, cancel, follow, liveness, warm start, Python API"),
    Floor(("schedule",), "recurring jobs: cron ticks submitted through control"),
    Floor(("cli",), "the command line: parsers, tables, printing only"),
    Floor(("__init__", "__main__"), "the face: the version, the lazy API, python -m fsdp_orch"),
)

# Imports that go up a floor today, each a wrong-way import to fix (move the thing imported down,
# or the importer up), not a reason to reorder the floors: (importer, imported) -> why it is here.
# An entry excuses the imported module and the packages around it (Python loads those first).
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}

# Modules without a docstring: their line in the doc.
NO_DOCSTRING = {
    "fsdp_orch.__main__": "``python -m fsdp_orch``: the command line.",
}
