"""Every fault written in the docs, the README and the CLI's help (``FSDP_ORCH_FAULT`` values)
parses as the bootstrap's parser reads it: a user who copies one gets that fault, not an error."""

from __future__ import annotations

import re
from pathlib import Path

from fsdp_orch.bootstrap.faults import KINDS, parse_faults

REPO = Path(__file__).resolve().parents[2]
# a fault value: a kind, then :key=value parts (placeholders such as N, R, S, K included)
FAULT = re.compile(r"\b(?:" + "|".join(KINDS) + r")(?::[a-z_]+=[^\s:`'\";,)\]]+)+")
PLACEHOLDERS = {"N": "12", "R": "1", "S": "2.5", "K": "1"}


def written_faults() -> list[tuple[str, str]]:
    files = [REPO / "README.md", *sorted((REPO / "fsdp_orch" / "cli").rglob("*.py")),
             REPO / "fsdp_orch" / "bootstrap" / "faults.py", *sorted((REPO / "docs").rglob("*.md"))]
    return [(str(path.relative_to(REPO)), match.group(0)) for path in files
            for match in FAULT.finditer(path.read_text())]


def test_the_docs_write_faults_at_all() -> None:
    found = written_faults()
    assert len(found) >= 5 and {"hang", "crash"} <= {f.split(":")[0] for _, f in found}, found


def test_every_fault_in_the_docs_parses() -> None:
    wrong = []
    for where, fault in written_faults():
        value = re.sub(r"=([NRSK])\b", lambda m: "=" + PLACEHOLDERS[m.group(1)], fault)
        try:
            parse_faults(value)
        except ValueError as exc:
            wrong.append(f"{where}: {fault}: {exc}")
    assert not wrong, "\n".join(wrong)
