"""May a module be imported as you: ``fit``'s model factory (``package.module:function``) is code
found by name, in the job file's folder first. A folder on the import path decides by what is *in*
it, not only by the files already there: in a sticky folder others can write (``/tmp``, a 1777
scratch), another account cannot touch your ``train.py`` but can add a package ``train/`` beside
it, which Python takes first. So a folder imported from must be writable by no one else, sticky or
not, and each module file found, each package folder, and every folder above them follow the
StrictModes rule (``places.trust``). Once those pass, no one but you or root can change them, so
the import that follows reads what was checked. Stdlib only; nothing is imported here."""

from __future__ import annotations

import os
import stat
import sys
from importlib.machinery import PathFinder

from fsdp_orch.places.private import OTHERS_WRITE, _who, user_name
from fsdp_orch.places.trust import load_problem


def folder_open_to_others(folder: str) -> str | None:
    """Why modules must not be imported from ``folder``: others can add to it (sticky or not)."""
    try:
        st = os.stat(folder)
    except OSError as exc:
        return f"{folder} cannot be read ({exc.strerror})"
    if st.st_mode & OTHERS_WRITE:
        return (f"{folder} can be written by others (owner {_who(st.st_uid, user_name)}, mode "
                f"{stat.S_IMODE(st.st_mode):04o}): another account can add a module there that "
                "is imported in place of yours")
    return None


def import_problem(module: str, first: str) -> str | None:
    """Why ``module`` (dotted) must not be imported with ``first`` at the head of the import path,
    or None when it may. Finds the module's files as Python would, without running any of them:
    each package on the way and the module itself must be yours (or root's), as must every folder
    above them, and the folders they are found in, or that make up a package, writable by no one
    else."""
    why = folder_open_to_others(first) or load_problem(first)
    if why is not None:
        return why
    search = [first, *sys.path]
    name = ""
    for part in module.split("."):
        name = f"{name}.{part}" if name else part
        spec = PathFinder.find_spec(name, search)
        if spec is None:
            return None  # the import itself says what is missing
        package = list(spec.submodule_search_locations or [])
        files = [] if spec.origin is None else [spec.origin]
        # the folder it was found in, and a package's own: what is in them decides what is imported
        folders = package if spec.origin is None else list(dict.fromkeys(
            [os.path.dirname(spec.origin), *(os.path.dirname(p) for p in package)]))
        for path in [*folders, *files]:
            why = (folder_open_to_others(path) if path in folders else None) or load_problem(path)
            if why is not None:
                return why
        search = package
    return None


__all__ = ["folder_open_to_others", "import_problem"]
