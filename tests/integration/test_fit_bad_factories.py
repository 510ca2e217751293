"""``fit`` with a model factory that does not give a model (issue 61's inputs): each is one line
naming ``fit.model`` and what went wrong, exit 2, no traceback; ``sys:exit`` no longer exits 0."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_harness import Cli

FACTORIES = ("import torch\n\n"
             "def boom():\n    raise RuntimeError('the factory broke')\n\n"
             "def wrong():\n    return 42\n\n"
             "NOT_A_FUNCTION = [1]\n")


@pytest.mark.parametrize(("model", "said"), [
    ("factories:boom", "the model factory factories:boom raised RuntimeError: the factory broke "
                       "(at {folder}/factories.py:4)"),
    ("factories:wrong", "the model factory factories:wrong returned a int, expected a "
                        "torch.nn.Module"),
    ("factories:NOT_A_FUNCTION", "factories:NOT_A_FUNCTION is a list, not a function"),
    ("sys:exit", "the model factory sys:exit exited (SystemExit None) instead of returning the "
                 "model")])
def test_a_factory_that_gives_no_model_is_one_line(cli: Cli, tmp_path: Path, model: str,
                                                   said: str) -> None:
    (tmp_path / "factories.py").write_text(FACTORIES)
    job = tmp_path / "job.yaml"
    job.write_text(f"name: f\nscript: factories.py\nprocs_per_node: 2\n"
                   f"fit: {{model: '{model}', batch_size: 2, seq_len: 8}}\n")
    proc = cli.run("fit", str(job), "--cluster", "local", "--gpu-memory", "1GB", timeout=300)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"fsdp-orch: error: {job}: fit.model: "), line
    assert said.format(folder=tmp_path) in line, line
