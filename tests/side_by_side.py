"""How the suite's tests share pytest-xdist workers (``scripts/test.sh`` runs
``pytest -n N --dist loadscope --no-loadscope-reorder``; a pytest plugin, see conftest.py).

A worker takes a whole test file at a time, so a file's module fixtures (a reference run, an HF
model) are made once. The tests of a machine-wide service are one unit: every SLURM test runs in
one worker, one after another, against the one test cluster, and so does every test on the sshd
hosts (their namespaces, bridge and addresses are fixed). Those two units, the longest (about
10 min each), come first, so that they start at once instead of after every file is handed out.
Then the longest files, longest first, and the rest as collected: the short files left for last even
out the workers' ends (with the files in collection order, the XLA file, 2 min, came last and one
worker ran on alone for 1.6 min).

xdist's own ``--dist loadgroup`` marks cannot do this here: it renames each test's node id, which
pytest 9.2 no longer reads."""

from __future__ import annotations

import pytest

SHARED_SERVICES = ("slurm", "ssh", "k8s")  # folders under tests/ whose tests share one service
# The longest files by their wall time in a 2-worker clean-clone run (990f3fa, 2026-11-28), longest
# first; 40 s and more each. A file not named here keeps its place in collection order after them.
LONGEST_FILES = tuple(f"tests/{name}.py" for name in (
    # its tests' durations added to 1,300 s in the clean-clone CI of 0199332 (the published peaks'
    # test 600 s of it, cut to 5 figures since), and it was handed out in collection order
    "integration/test_fit",
    "integration/test_unchanged_scripts", "integration/test_supervisor_faults",
    "integration/test_default_hang_window", "integration/test_local_backend",
    "integration/test_runtime_checkpoint", "xla/test_xla_fsdp",
    "integration/test_unchanged_hf_trainer",
    "integration/test_runtime_fsdp", "integration/test_hang_verdicts",
    "integration/test_supervisor",
    "integration/test_runtime_launchers", "integration/test_runtime_faults",
    "integration/test_init_from",
    "integration/test_warm_standby", "unit/test_bootstrap", "integration/test_goodput",
    "integration/test_notify", "integration/test_unchanged_single_file",
    "integration/test_prometheus",  # 35-54 s alone beside other work (not in that run)
    "integration/test_fit_real",  # 38-49 s alone beside other work (not in that run)
))


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its shared service's name, or its file."""
    path = nodeid.split("::", 1)[0]
    folder = path.split("/")[1] if path.startswith("tests/") and path.count("/") >= 2 else ""
    return folder if folder in SHARED_SERVICES else path


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The shared services' tests first (in that order), then the longest files (longest first),
    then the rest as collected."""
    first = {unit: place for place, unit in enumerate((*SHARED_SERVICES, *LONGEST_FILES))}
    # stable: each part keeps its order
    items.sort(key=lambda item: first.get(unit_of(item.nodeid), len(first)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    from xdist.scheduler import LoadScopeScheduling

    class ByServiceOrFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return ByServiceOrFile(config, log)
