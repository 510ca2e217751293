"""``fsdp-orch metrics --textfile DIR``: the metrics as one ``.prom`` file for node_exporter's
textfile collector (``--collector.textfile.directory``), replaced whole at each write.

The file is 0644, not private like the rest of fsdp-orch's files: node_exporter runs as another user
(Debian's ``prometheus``) and must read it. It holds what the exporter serves (job ids, names,
clusters, the user's name, states, steps, seconds, failure categories), never a path, a command
line, an environment variable or a log line.
"""

from __future__ import annotations

import os

from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from fsdp_orch.places.private import _who, user_name, write_atomically

FILE_NAME = "fsdp_orch.prom"
FILE_MODE = 0o644


def write_textfile(folder: str, registry: CollectorRegistry, name: str = FILE_NAME) -> str:
    """Write ``registry``'s metrics to ``folder/name`` through a hidden temporary file
    (node_exporter reads only ``*.prom`` names) and a rename: a scrape sees the old file or the
    new, never half. The temporary name is random: the folder may be node_exporter's, which
    others can write, and a name known ahead could be planted."""
    path = os.path.join(folder, name)
    try:
        write_atomically(path, generate_latest(registry), mode=FILE_MODE)
    except PermissionError as exc:
        raise OSError(exc.errno, taken(path) or exc.strerror) from None
    return path


def taken(path: str) -> str | None:
    """Why the file at ``path`` cannot be replaced, when another account made it first (in a
    sticky folder no one but its owner may replace it): node_exporter serves it as the user's."""
    try:
        owner = os.lstat(path).st_uid
    except OSError:
        return None
    if owner == os.getuid():
        return None
    return (f"{path} was made by {_who(owner, user_name)}, not by you: it takes your metrics' "
            "place and node_exporter serves it as yours; its owner or root must remove it, or use "
            "a textfile folder that only you (and node_exporter's group) can write")
