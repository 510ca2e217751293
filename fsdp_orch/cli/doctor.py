"""``fsdp-orch doctor [--cluster NAME]``: what a job on that cluster needs, each check with a fix.

The checks every cluster shares live here (this host's torch, where the index database lives); a
cluster kind adds its own through ``ClusterKind.doctor``. Commands go through one runner."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from fsdp_orch.backends.registry import cluster_kind, load_profile
from fsdp_orch.observe import command
from fsdp_orch.observe.command import Runner
from fsdp_orch.places.home import filesystem_of, home_dir, on_network_filesystem, store_path
from fsdp_orch.vocab.checks import MIN_TORCH_TEXT, RANKS_NEED, TORCH_VERSION, Check, torch_too_old


def torch_version_of(python: str, run: Runner = command.run) -> tuple[str | None, str]:
    """``python``'s torch version, or None and the last line it said instead."""
    result = run([python, "-c", TORCH_VERSION], 120.0)
    if result.returncode == 0 and result.stdout.strip():
        return result.stdout.strip(), ""
    return None, (result.stderr.strip().splitlines() or ["no output"])[-1]


def torch_here(python: str = sys.executable, run: Runner = command.run,
               found: tuple[str | None, str] | None = None) -> tuple[Check, str | None]:
    """Does this host's Python import torch? (the check, and the version). The CLI needs none: a
    login node may have no torch; a machine that runs ranks needs one (``torch_for_ranks``).
    ``found``: ``torch_version_of(python)`` when already asked."""
    version, _ = found if found is not None else torch_version_of(python, run)
    if version is None:
        return Check("torch on this host", True, f"{python} has no torch, and the CLI needs none "
                     f"(submit, status, render, doctor); {RANKS_NEED}"), None
    return Check("torch on this host", True, f"{python}: torch {version}"), version


def torch_for_ranks(python: str, run: Runner = command.run,
                    found: tuple[str | None, str] | None = None) -> Check:
    """Can ``python``, the ranks' (a profile's ``python:``), run them: torch >= MIN_TORCH?
    ``found``: ``torch_version_of(python)`` when already asked (the CLI's own python)."""
    version, said = found if found is not None else torch_version_of(python, run)
    wanted = f"torch>={MIN_TORCH_TEXT}"
    if version is None:
        return Check("torch for the ranks", False, f"{python} cannot import torch: {said}",
                     f"{RANKS_NEED}; or set the profile's python: to the environment your "
                     "training uses")
    if torch_too_old(version):
        return Check("torch for the ranks", False, f"{python}: torch {version}, older than "
                     f"{wanted}", f"pip install '{wanted}' in that environment")
    return Check("torch for the ranks", True, f"{python}: torch {version}")


def fsdp_orch_for_ranks(python: str) -> Check:
    """Does ``python``, the ranks' on this machine, import its own fsdp_orch (the bootstrap and the
    node agent run from it, never from the CLI's environment), the same version as this CLI's?"""
    from fsdp_orch.places.python_env import what_python_has
    from fsdp_orch.vocab.version import __version__

    has = what_python_has(python)
    fix = (f"{python} -m pip install 'fsdp-orch[runtime]=={__version__}', or set python: in the "
           "profile to the python of the environment your training uses")
    if has.modules is None or "fsdp_orch" not in has.modules:
        why = f"could not be asked ({has.said})" if has.modules is None else \
            "cannot import fsdp_orch"
        return Check("fsdp-orch for the ranks", False, f"{python} {why}: the ranks' bootstrap and "
                     "the node agent run from it", fix)
    if has.fsdp_orch_version and has.fsdp_orch_version != __version__:
        return Check("fsdp-orch for the ranks", False, f"{python}: fsdp-orch "
                     f"{has.fsdp_orch_version}, {__version__} here", fix)
    return Check("fsdp-orch for the ranks", True, f"{python}: fsdp-orch "
                 f"{has.fsdp_orch_version or '(version not read)'}")


def home_checks(home: str | None = None, mounts: str | None = None) -> list[Check]:
    root = home or home_dir()
    fs = filesystem_of(root, mounts) or "unknown"
    db = store_path(root, mounts)
    if on_network_filesystem(root, mounts):
        return [Check("FSDP_ORCH_HOME", True,
                      f"{root} is on {fs}, a network filesystem: the nodes can "
                      f"share its runs folder; the index database is kept locally at {db}")]
    return [Check("FSDP_ORCH_HOME", True, f"{root} is on {fs} (local); the index database is {db}",
                  "for a multi-host cluster, put FSDP_ORCH_HOME on the filesystem the nodes share")]


SHOWN_PATHS = 20  # untrusted paths named one by one; the rest are counted


def _run_roots(home: str, cwd: str | None) -> list[str]:
    """Every runs folder to look at: the home's, each profile's
    ``<shared_dir>/<user>/runs``, and the ``<shared_dir>/runs`` where fsdp-orch before
    per-user roots put runs (and others may plant)."""
    from fsdp_orch.record.run_roots import all_shared_dirs, shared_run_root

    roots = [os.path.join(home, "runs")]
    for shared in all_shared_dirs(home, cwd):
        roots += [os.path.join(shared_run_root(shared), "runs"), os.path.join(shared, "runs")]
    return list(dict.fromkeys(roots))


def untrusted_paths(home: str, cwd: str | None = None) -> tuple[list[str], list[str]]:
    """(what fsdp-orch does not read because someone else owns it or can write it, each once as
    "path: why"; the trusted run folders). Run roots, job folders, event files and schedules."""
    from fsdp_orch.places.private import untrusted
    from fsdp_orch.record.run_roots import root_problem, run_folder_problem
    from fsdp_orch.schedule.book import ScheduleBook

    found: list[str] = []
    trusted: list[str] = []
    for root in _run_roots(home, cwd):
        problem = root_problem(root)
        if problem:
            found.append(f"{root}: {problem}")
        try:
            names = sorted(os.listdir(root))
        except OSError:
            continue
        for name in names:
            folder = os.path.join(root, name)
            if not os.path.isdir(folder) or name.startswith("."):
                continue
            problem = run_folder_problem(folder)
            if problem:
                found.append(f"{folder}: {problem}")
                continue
            trusted.append(folder)
            events = os.path.join(folder, "events")
            try:
                files = sorted(os.listdir(events))
            except OSError:
                continue
            for file in files:
                problem = untrusted(os.path.join(events, file), [events])
                if problem:
                    found.append(f"{os.path.join(events, file)}: {problem}")
    book = ScheduleBook(Path(home))
    try:
        schedules = sorted(os.listdir(book.root))
    except OSError:
        schedules = []
    for name in schedules:
        if os.path.isdir(os.path.join(book.root, name)) and not name.startswith("."):
            problem = book.problem(name)
            if problem:
                found.append(f"{os.path.join(book.root, name)}: {problem}")
    return found, trusted


def trust_checks(home: str | None = None, cwd: str | None = None) -> list[Check]:
    """The home is private, nothing others wrote is read (each such path named once), and which
    checkpoint folders of the jobs others can read."""
    from fsdp_orch.places.private import root_verdict, seen

    root = home or home_dir()
    checks = []
    found = seen(root, follow=True)
    if found is not None:
        verdict, why = root_verdict(found, os.getuid())
        checks.append(Check("FSDP_ORCH_HOME private", verdict != "refuse",
                            why or f"{root} is yours and 0700"
                            + (" (made so at the next command)" if verdict == "tighten" else ""),
                            "" if verdict != "refuse"
                            else f"chmod 700 {root}, or set FSDP_ORCH_HOME to a folder "
                                 "of your own"))
    paths, trusted = untrusted_paths(root, cwd)
    for line in paths[:SHOWN_PATHS]:
        checks.append(Check("not yours, not read", False, line,
                            "remove it if you do not know it; "
                            "fsdp-orch never lists, adopts or runs it"))
    if len(paths) > SHOWN_PATHS:
        checks.append(Check("not yours, not read", False, f"and {len(paths) - SHOWN_PATHS} more",
                            ""))
    if not paths:
        checks.append(Check("files others could write", True,
                            "every run folder, event file and schedule "
                            "read is yours and writable by you alone"))
    checks += checkpoint_checks(trusted)
    checks.append(node_tmp_check())
    checks += secret_checks()
    return checks


def secret_checks() -> list[Check]:
    """The values that came by reference and wait in the private home: the folder 0700, each file
    0600 and the caller's (they are removed once the job has ended and its notifier is done)."""
    import stat

    from fsdp_orch.places.secrets import secrets_dir

    folder = secrets_dir()
    try:
        names = sorted(os.listdir(folder))
        mode = os.stat(folder).st_mode
    except OSError:
        return [Check("secrets kept", True,
                      "no value that came by reference is kept (none is needed now)")]
    bad = [name for name in names
           if (st := os.lstat(os.path.join(folder, name))).st_uid != os.getuid()
           or st.st_mode & 0o077]
    if mode & 0o077 or bad:
        return [Check("secrets kept", False,
                      f"{folder} (mode {stat.S_IMODE(mode):04o}) holds files others "
                      f"could read or that are not yours: {', '.join(bad) or 'the folder itself'}",
                      f"chmod 700 {folder}; chmod 600 the files named, "
                      "and remove any you did not make")]
    jobs = sorted({name.split(".")[0] for name in names})
    return [Check("secrets kept", True,
                  f"{len(jobs)} job(s) have values kept 0600 in {folder} while a supervisor "
                  "or notifier on this machine may need them" if jobs
                  else "no value that came by reference is kept")]


def checkpoint_checks(run_folders: list[str]) -> list[Check]:
    """The checkpoint folders of these jobs that other accounts can read (the user's choice: its
    mode is left alone, and said here)."""
    import stat

    dirs: dict[str, None] = {}
    for folder in run_folders:
        try:
            with open(os.path.join(folder, "submission.json"), encoding="utf-8") as f:
                data = json.load(f)
            directory = data["job"]["checkpoint"]["dir"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(directory, str) and directory:
            dirs[os.path.expanduser(directory)] = None
    from fsdp_orch.places.private import user_name
    from fsdp_orch.places.trust import load_problem

    checks = []
    for directory in dirs:
        try:
            st = os.stat(directory)
        except OSError:
            continue
        mine, bits = st.st_uid == os.getuid(), stat.S_IMODE(st.st_mode)
        why = load_problem(directory)
        if why is not None:  # a job would refuse it at submit (control.planning)
            checks.append(Check("checkpoint.dir yours", False,
                                f"{why}: a checkpoint there could have been planted by someone "
                                "else, and a job loads what it holds",
                                f"chmod go-w {directory} and the folders named" if mine else
                                "copy the checkpoints you trust into a folder of yours (mkdir -m "
                                "700 DIR; cp -r ...) and set checkpoint.dir to it: a folder of "
                                f"{user_name(st.st_uid)}'s is not yours to chmod"))
        elif st.st_mode & (stat.S_IRGRP | stat.S_IROTH):
            checks.append(Check("checkpoint.dir readable by others", False,
                                f"{directory} (mode {bits:04o}): "
                                "other accounts can read these checkpoints",
                                f"chmod 700 {directory} if they are not meant to be shared"
                                if mine else f"ask {user_name(st.st_uid)}, its owner, or keep "
                                             "them in a folder of yours"))
    return checks


def node_tmp_check(tmp: str | None = None) -> Check:
    """This machine's node-local folder (``/tmp/fsdp-orch-<uid>``, heartbeats and the warm
    standby's sockets): one someone else made first, or that others can write, is never used (a
    job's node makes a private one beside it and says so)."""
    from fsdp_orch.nodeagent.beat_dir import NODE_TMP
    from fsdp_orch.places.trust import load_problem

    folder = os.path.join(tmp or NODE_TMP, f"fsdp-orch-{os.getuid()}")
    if not os.path.lexists(folder):
        return Check("node-local folder", True, f"{folder} is not there yet (made 0700 by a job)")
    why = load_problem(folder)
    if why is None:
        return Check("node-local folder", True, f"{folder} is yours and closed to others")
    return Check("node-local folder", False,
                 f"{why}: jobs on this machine keep their heartbeats in a private folder made "
                 "beside it instead (notice node_tmp_taken)",
                 f"ask its owner or root to remove {folder}")


def report(checks: list[Check], as_json: bool) -> str:
    if as_json:
        return json.dumps({"ok": all(c.ok for c in checks), "checks": [asdict(c) for c in checks]},
                          indent=2)
    lines = []
    for c in checks:
        lines.append(f"[{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}")
        if c.fix and not c.ok:
            lines.append(f"       fix: {c.fix}")
    return "\n".join(lines)


def run_doctor(cluster: str | None, as_json: bool, run: Runner = command.run) -> tuple[str, bool]:
    """(the report, whether every check passed)."""
    found = torch_version_of(sys.executable, run)  # asked once: importing torch takes seconds
    check, version = torch_here(run=run, found=found)
    checks = [check, *home_checks(), *trust_checks()]
    if cluster is not None:
        profile, _ = load_profile(cluster)
        if profile.kind == "local":  # this machine runs the ranks
            checks.append(torch_for_ranks(profile.python, run,
                                          found if profile.python == sys.executable else None))
            checks.append(fsdp_orch_for_ranks(profile.python))
        checks += cluster_kind(profile.kind).doctor(profile, version, run)
    return report(checks, as_json), all(c.ok for c in checks)


__all__ = ["Check", "checkpoint_checks", "home_checks", "node_tmp_check", "report", "run_doctor",
           "torch_for_ranks", "torch_here", "trust_checks", "untrusted_paths"]
