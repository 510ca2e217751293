"""Where a node's ranks put their heartbeat files: node-local tmp, never the shared run folder.

``/tmp/fsdp-orch-<uid>/<job>/attempt-<A>/node-<N>``: the node rank is in the path because several
nodes of a test cluster (or an oversubscribed machine) share one ``/tmp``. The first folder is the
user's alone; one that another account made, or can write, is refused (``private_beat_dir``).
A node's relay (its agent, or an SSH host's report) reads the folder with ``read_beat_files``.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

from fsdp_orch.observe.step_marks import with_step_mark

NODE_TMP = "/tmp"
_RANK_FILE = re.compile(r"rank-(\d+)\.json")


def user_tmp_root(uid: int | None = None, tmp: str = NODE_TMP) -> str:
    """``<tmp>/fsdp-orch-<uid>``; on a node whose launch script had to make a private folder
    instead (that one was someone else's), the one it named in ``FSDP_ORCH_NODE_TMP``."""
    named = os.environ.get("FSDP_ORCH_NODE_TMP")
    if uid is None and tmp == NODE_TMP and named:
        return named
    return os.path.join(tmp, f"fsdp-orch-{os.getuid() if uid is None else uid}")


# In a node's log folder: the node-local folder its launch script made in place of a taken
# ``fsdp-orch-<uid>`` (templates/_node_body.sh.j2), for the SSH hosts' report to read beats from.
MOVED = "node_tmp_moved"


def node_beat_dir(job_id: str, attempt: int, node_rank: int, uid: int | None = None,
                  tmp: str = NODE_TMP) -> str:
    return os.path.join(user_tmp_root(uid, tmp), job_id, f"attempt-{attempt}", f"node-{node_rank}")


def moved_beat_dir(attempt_dir: str, job_id: str, attempt: int, node_rank: int) -> str | None:
    """The node's beat folder as its launch script said it in its log folder's ``MOVED`` file
    (the private folder it made in place of a taken ``fsdp-orch-<uid>``; empty: the usual one);
    None while nothing is said there (yet)."""
    try:
        with open(os.path.join(attempt_dir, f"node-{node_rank}", MOVED)) as f:
            moved = f.read().strip()
    except OSError:
        return None
    if moved:
        return os.path.join(moved, job_id, f"attempt-{attempt}", f"node-{node_rank}")
    return node_beat_dir(job_id, attempt, node_rank)


def taken_note(attempt_dir: str, node_rank: int, tmp: str = NODE_TMP) -> str | None:
    """What the node's launch script said when its ``fsdp-orch-<uid>`` was someone else's, in the
    words of its own notice (templates/_node_body.sh.j2): whose the usual folder is and which one
    the node uses instead; None when the usual one is in use (or nothing is said yet)."""
    try:
        with open(os.path.join(attempt_dir, f"node-{node_rank}", MOVED)) as f:
            moved = f.read().strip()
    except OSError:
        return None
    if not moved:
        return None
    usual = os.path.join(tmp, f"fsdp-orch-{os.getuid()}")
    try:
        st = os.lstat(usual)
    except OSError:
        whose = "not a folder"
    else:
        import pwd

        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = str(st.st_uid)
        whose = (f"owned by {owner} (uid {st.st_uid}), mode {stat.S_IMODE(st.st_mode):o}"
                 if stat.S_ISDIR(st.st_mode) else "not a folder")
    return f"{usual} is {whose}: this node keeps its heartbeats in {moved} instead"


def found_beat_dir(attempt_dir: str, job_id: str, attempt: int, node_rank: int) -> str:
    """The node's beat folder on this host, as its launch script made it: the usual one, or the one
    it named in place of a taken ``fsdp-orch-<uid>`` (``moved_beat_dir``)."""
    return (moved_beat_dir(attempt_dir, job_id, attempt, node_rank)
            or node_beat_dir(job_id, attempt, node_rank))


def private_beat_dir(path: str) -> str | None:
    """Create ``path`` (0700 folders) below a user root that is ours and closed to others; the
    reason it must not be used, or None. A root another account owns is never written into."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(path)))  # <root>/<job>/attempt-A/node-N
    if not os.path.basename(root).startswith("fsdp-orch-"):
        return (f"{path} is not a node beat folder "
                "(<tmp>/fsdp-orch-<uid>/<job>/attempt-<A>/node-<N>)")
    try:
        os.mkdir(root, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"{root}: {exc.strerror}"
    try:
        st = os.lstat(root)
    except OSError as exc:
        return f"{root}: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return (f"{root} is not a folder of this user's (uid {st.st_uid}, "
                f"mode {stat.filemode(st.st_mode)})")
    if st.st_mode & 0o077:
        os.chmod(root, 0o700)
    here = root
    for part in os.path.relpath(path, root).split(os.sep):
        here = os.path.join(here, part)
        try:
            os.mkdir(here, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            return f"{here}: {exc.strerror}"
    return None


def rank_beat_path(beat_dir: str | None, run_dir: str, attempt: int, rank: int) -> str | None:
    """Where a rank writes its heartbeat: in its node's beat folder (``FSDP_ORCH_BEAT_DIR``, set by
    every launch script fsdp-orch renders), else the run folder's ``heartbeats/`` (a process started
    by hand with only ``FSDP_ORCH_RUN_DIR``). None when the node folder cannot be used: no
    heartbeat, said once on stderr (the supervisor then reports that hang detection has no
    signal)."""
    if beat_dir:
        problem = private_beat_dir(beat_dir)
        if problem is not None:
            import sys

            print(f"[fsdp-orch] no heartbeat for rank {rank}: {problem}", file=sys.stderr,
                  flush=True)
            return None
        return os.path.join(beat_dir, f"rank-{rank}.json")
    from fsdp_orch.observe.heartbeats import heartbeat_path

    path = heartbeat_path(run_dir, attempt, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(path)


def read_beat_files(beat_dir: str) -> dict[int, dict[str, Any]]:
    """The decoded heartbeat of every rank with a file in ``beat_dir``, by rank; unreadable ones
    skipped: what a node's relay (its agent, or an SSH host's report) reads each look."""
    try:
        names = os.listdir(beat_dir)
    except OSError:
        return {}
    out: dict[int, dict[str, Any]] = {}
    for name in names:
        match = _RANK_FILE.fullmatch(name)
        if not match:
            continue
        path = os.path.join(beat_dir, name)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.loads(f.read())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("rank") == int(match.group(1)):
            out[int(match.group(1))] = with_step_mark(data, path)
    return out


def read_node_heartbeats(job_id: str, attempt: int,
                         tmp: str = NODE_TMP) -> dict:  # type: ignore[type-arg]
    """Every heartbeat of ``attempt`` that this machine's nodes hold (all its ``node-N`` folders),
    by rank: what a test or a bench on the nodes' machine reads; the supervisor gets them from the
    agents."""
    from fsdp_orch.observe.heartbeats import read_heartbeat_file

    folder = os.path.join(user_tmp_root(None, tmp), job_id, f"attempt-{attempt}")
    out = {}
    try:
        nodes = sorted(os.listdir(folder))
    except OSError:
        return {}
    for node in nodes:
        try:
            names = os.listdir(os.path.join(folder, node))
        except OSError:
            continue
        for name in names:
            if name.startswith("rank-") and name.endswith(".json"):
                try:
                    beat = read_heartbeat_file(os.path.join(folder, node, name))
                except (OSError, ValueError):
                    continue
                out[beat.rank] = beat
    return dict(sorted(out.items()))


def remove_earlier_attempts(job_id: str, attempt: int, tmp: str = NODE_TMP) -> None:
    """The beat folders this node kept of the job's earlier attempts (kept for reading after an
    attempt ends; gone once the next one starts here)."""
    import shutil

    folder = os.path.join(user_tmp_root(None, tmp), job_id)
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if name.startswith("attempt-") and name[8:].isdigit() and int(name[8:]) < attempt:
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)


__all__ = ["NODE_TMP", "found_beat_dir", "moved_beat_dir", "node_beat_dir", "private_beat_dir",
           "rank_beat_path", "read_beat_files", "read_node_heartbeats", "remove_earlier_attempts",
           "taken_note", "user_tmp_root"]
