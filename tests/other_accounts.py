"""Playing the other account (issue 42): what tests/integration/test_other_accounts.py and
tests/slurm/test_slurm_other_accounts.py plant as ``fsdporchtest`` (secret_checks.OTHER)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import secret_checks


def as_other(account: tuple[int, int], script: str) -> None:
    """Run ``script`` (bash) as the other account."""
    uid, gid = account
    subprocess.run(secret_checks.as_account(uid, gid, ["bash", "-euc", script]), check=True,
                   capture_output=True, timeout=60)


def plant_wrapper(account: tuple[int, int], scratch: Path, marker: Path) -> Path:
    """The other account's ``python``: it notes who ran it, then runs python."""
    wrapper = scratch / "python-wrapper"
    as_other(account, f"printf '#!/bin/sh\\nid > {marker}\\nexec python3 \"$@\"\\n' > {wrapper}; "
                      f"chmod 755 {wrapper}")
    return wrapper


# A complete-looking DCP checkpoint of step 400 whose ``.metadata`` pickle runs ``id > MARKER`` when
# loaded; written to a file and run as ``python3 FILE FOLDER MARKER``.
PLANT_CHECKPOINT = r"""
import os, pickle, sys
folder, marker = sys.argv[1], sys.argv[2]
class Payload:
    def __reduce__(self):
        return (os.system, (f"id > {marker}",))
step = os.path.join(folder, "step-00000400")
os.makedirs(step)
with open(os.path.join(step, ".metadata"), "wb") as f:
    pickle.dump(Payload(), f)
with open(os.path.join(step, "COMMITTED"), "w") as f:
    f.write('{"step": 400, "world_size": 2}\n')
"""
