"""``fit.lora.dropout``, PEFT's ``lora_dropout``: a probability in [0, 1), 0 by default; a bad value
is one line naming the file, the field and what was expected; a measurement cached without dropout
is never reused with it; and an adapter with dropout keeps for backward what CUDA's dropout keeps,
a one-byte mask of its input (the CPU's ``nn.Dropout`` would keep one in the input's dtype)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdp_orch.fit.estimate import cache_key
from fsdp_orch.fit.setup import fit_setup
from fsdp_orch.jobspec.loading import load_job
from fsdp_orch.vocab.errors import InputError


def job_file(tmp_path: Path, lora: str) -> Path:
    job = tmp_path / "job.yaml"
    job.write_text(f"name: j\nscript: t.py\nfit: {{model: config.json, lora: {{{lora}}}}}\n")
    return job


@pytest.mark.parametrize("given,expected", [
    ("1.0", "expected less than 1"), ("-0.1", "expected greater than or equal to 0"),
    ("true", "expected a number"), (".nan", "expected a finite number"),
    ("high", "expected a valid number")])
def test_a_dropout_that_is_not_a_probability_below_1_is_one_line_naming_it(
        tmp_path: Path, given: str, expected: str) -> None:
    job = job_file(tmp_path, f"r: 8, dropout: {given}")
    with pytest.raises(InputError) as caught:
        load_job(job, [])
    [line] = str(caught.value).splitlines()
    assert line.startswith(f"{job}:3: fit.lora.dropout: {expected}"), line


def test_dropout_is_none_unless_asked_and_a_measurement_without_it_is_not_reused_with_it(
        tmp_path: Path) -> None:
    keys = {}
    for given in ("", "0.0", "0.1"):
        job = job_file(tmp_path, "r: 8" + (f", dropout: {given}" if given else ""))
        setup = fit_setup(load_job(job, [])[0], 2, str(job))
        keys[given] = (setup.fit.lora.dropout, cache_key(setup, "{}"))
    assert keys[""] == keys["0.0"] == (0.0, keys["0.0"][1])
    assert keys["0.1"][0] == 0.1 and keys["0.1"][1] != keys["0.0"][1]


def test_an_adapter_with_dropout_keeps_its_dropped_input_and_a_one_byte_mask() -> None:
    import torch

    from fsdp_orch.fit.adapters import LoraLinear

    x = torch.randn(3, 16, requires_grad=True)
    saved: dict[float, list] = {0.0: [], 0.1: []}
    for p, found in saved.items():
        adapter = LoraLinear(torch.nn.Linear(16, 8), 16, 8, r=2, dtype=torch.float32, dropout=p)
        with torch.autograd.graph.saved_tensors_hooks(found.append, lambda t: t):
            adapter(x)
    kept = {p: sorted(str(t.dtype) for t in found if t.shape == x.shape and t is not x)
            for p, found in saved.items()}
    assert kept == {0.0: [], 0.1: ["torch.bool", "torch.float32"]}
