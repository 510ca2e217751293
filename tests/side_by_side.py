"""How the suite's tests share pytest-xdist workers (``scripts/test.sh`` runs
``pytest -n N --dist loadscope --no-loadscope-reorder``; a pytest plugin, see conftest.py).

A worker takes a whole test file at a time, so a file's module fixtures (a reference run, an HF
model) are made once. The tests of a machine-wide service are one unit: every SLURM test runs in
one worker, one after another, against the one test cluster, and so does every test on the sshd
hosts (their namespaces, bridge and addresses are fixed). Those two units, the longest (about
10 min each), come first, so that they start at once instead of after every file is handed out.

xdist's own ``--dist loadgroup`` marks cannot do this here: it renames each test's node id, which
pytest 9.2 no longer reads."""

from __future__ import annotations

import pytest

SHARED_SERVICES = ("slurm", "ssh")  # folders under tests/ whose tests share one service


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its shared service's name, or its file."""
    path = nodeid.split("::", 1)[0]
    folder = path.split("/")[1] if path.startswith("tests/") and path.count("/") >= 2 else ""
    return folder if folder in SHARED_SERVICES else path


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The shared services' tests first (in that order), the rest as collected."""
    def rank(item: pytest.Item) -> int:
        unit = unit_of(item.nodeid)
        return SHARED_SERVICES.index(unit) if unit in SHARED_SERVICES else len(SHARED_SERVICES)
    items.sort(key=rank)  # stable: the order within each part stays


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    from xdist.scheduler import LoadScopeScheduling

    class ByServiceOrFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return ByServiceOrFile(config, log)
