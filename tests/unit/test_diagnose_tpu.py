"""`fsdp-orch diagnose` on real TPU/XLA failure lines from public issues (pytorch/xla, Lightning,
transformers, TPU training projects; tests/fixtures/corpus/f_tpu_xla.json): the runtime's errors
(mesh service, TPU initialization, Bad StatusOr, XRT sessions) are xla_error, and lines that say a
worker was preempted or lost are preemption_or_node_lost. Through the real CLI, one call for all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CASES = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "corpus" / "f_tpu_xla.json").read_text())


def test_diagnose_classifies_every_tpu_line(tmp_path) -> None:
    assert (len(CASES) >= 15
            and {c["category"] for c in CASES} == {"xla_error", "preemption_or_node_lost"})
    files = []
    for i, case in enumerate(CASES):
        path = tmp_path / f"tpu-{i}.log"
        path.write_text(case["text"])
        files.append(str(path))
    proc = subprocess.run([sys.executable, "-m", "fsdp_orch", "diagnose", "--json", *files],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = {Path(r["file"]).name: r for r in json.loads(proc.stdout)}
    wrong = [(case["source"], case["category"], got[f"tpu-{i}.log"]["category"])
             for i, case in enumerate(CASES) if got[f"tpu-{i}.log"]["category"] != case["category"]]
    assert wrong == [], wrong
    assert all(got[f"tpu-{i}.log"]["evidence"] for i in range(len(CASES)))
