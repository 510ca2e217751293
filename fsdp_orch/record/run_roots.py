"""Which folders hold job run folders: ``$FSDP_ORCH_HOME/runs``, and ``<shared_dir>/<user>/runs`` of
every cluster profile that names a ``shared_dir`` (the run root the login nodes and compute nodes
share; a folder of this user's, 0700, inside a scratch that other accounts can reach).

A second login node finds the jobs of the first through these. The profiles' YAML is read only when
a profile file changed since the last look (its names and mtimes are the cache key in the index's
meta table), so ``status`` stays cheap. Stdlib only until then.
"""

from __future__ import annotations

import os

from fsdp_orch.places.builtin import profile_dirs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from fsdp_orch.record.store import Store

# The cache: the profile files' names and mtimes, and the shared dirs they named (plain text:
# ``json`` would cost ``status`` its import).
FILES_KEY, ROOTS_KEY = "profiles_seen", "shared_dirs"


def _profile_files(dirs: list[str]) -> list[tuple[str, int]]:
    found = []
    for directory in dirs:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith((".yaml", ".yml")):
                try:
                    found.append((entry.path, entry.stat().st_mtime_ns))
                except OSError:
                    continue
    return sorted(found)


def shared_dir_of(path: str) -> str | None:
    """The ``shared_dir`` a profile file names (expanded), or None; an unreadable profile names none
    (``submit`` and ``doctor`` report its errors)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return None
    value = data.get("shared_dir") if isinstance(data, dict) else None
    if not isinstance(value, str) or not value:
        return None
    expanded = os.path.expanduser(value)
    return os.path.normpath(expanded) if os.path.isabs(expanded) else None


def shared_run_root(shared_dir: str, user: str | None = None) -> str:
    """The run root of this user under a profile's ``shared_dir``: ``<shared_dir>/<user>`` (its
    ``runs/`` holds the run folders)."""
    from fsdp_orch.places.private import user_name

    return os.path.join(shared_dir, user or user_name())


def runs_roots(store: Store, home: str, cwd: str | None = None) -> list[str]:
    """``$FSDP_ORCH_HOME/runs`` first, then each profile's ``<shared_dir>/<user>/runs``."""
    files = "\n".join(f"{path}\t{mtime}" for path, mtime in _profile_files(profile_dirs(home, cwd)))
    if store.meta_text(FILES_KEY) == files:
        shared = [d for d in (store.meta_text(ROOTS_KEY) or "").split("\n") if d]
    else:
        shared = sorted({d for line in files.splitlines()
                         if (d := shared_dir_of(line.split("\t")[0]))})
        store.set_meta_text(ROOTS_KEY, "\n".join(shared))
        store.set_meta_text(FILES_KEY, files)
    own = os.path.join(home, "runs")
    return [own, *(r for d in shared if (r := os.path.join(shared_run_root(d), "runs")) != own)]


def all_shared_dirs(home: str, cwd: str | None = None) -> list[str]:
    """Every profile's ``shared_dir`` (read afresh: for ``doctor``)."""
    files = _profile_files(profile_dirs(home, cwd))
    return sorted({d for path, _ in files if (d := shared_dir_of(path))})


def run_folder_problem(run_dir: str) -> str | None:
    """Why the run folder ``run_dir`` (``<run root>/runs/<id>``) must not be read, adopted or
    cancelled, or None: it, its ``submission.json`` and ``events/`` must be this user's, and no one
    else may write them or the folders above up to the run root."""
    from fsdp_orch.places.private import untrusted

    runs = os.path.dirname(run_dir)
    above = [runs, os.path.dirname(runs)]
    return (untrusted(run_dir, above)
            or untrusted(os.path.join(run_dir, "submission.json"), [run_dir, *above])
            or untrusted(os.path.join(run_dir, "events"), [run_dir, *above]))


def root_problem(root: str) -> str | None:
    """Why the run root ``root`` (a ``runs`` folder) must not be read,
    or None (one not there: None)."""
    from fsdp_orch.places.private import untrusted

    return untrusted(root, [os.path.dirname(root)]) if os.path.lexists(root) else None
