"""``fsdp-orch fit`` end to end on a small Llama built from its config (no hub, no weights): the
real ``fully_shard`` over a fake process group of 2 ranks, under ``FakeTensorMode`` and
``FSDPMemTracker``, in the CLI's own process. What the tracker counts is checked against what the
shapes say (FSDP shards each parameter over the ranks; AdamW keeps two values a trainable one),
with LoRA (only the adapters train) and QLoRA (the base weights in 4 bits); a second run is taken
from the cache; a job without a ``fit:`` block is one line, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_harness import REPO, Cli

pytestmark = pytest.mark.slow

TINY = REPO / "tests" / "fixtures" / "fit" / "tiny-llama"
FP32 = 4


def tiny_job(tmp_path: Path, fit: str, fsdp: str = "") -> Path:
    shutil.copytree(TINY, tmp_path / "tiny-llama")
    job = tmp_path / "job.yaml"
    job.write_text("name: tiny-fit\nscript: train.py\nprocs_per_node: 2\n"
                   f"fsdp: {{mixed_precision: 'no', {fsdp}}}\n"
                   f"fit: {{model: tiny-llama, batch_size: 2, seq_len: 64, {fit}}}\n")
    return job


def fit_json(cli: Cli, job: Path, *extra: str) -> dict:
    proc = cli.run("fit", str(job), "--cluster", "local", "--json", *extra, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_tracked_shards_and_optimizer_state_are_what_the_shapes_say_and_a_rerun_is_cached(
        cli: Cli, tmp_path: Path) -> None:
    job = tiny_job(tmp_path, "dtype: float32")
    first = fit_json(cli, job, "--gpu-memory", "1GB")
    assert first["ranks"] == 2 and first["cached"] is False
    params, tracked = first["parameters"], first["tracked_bytes"]
    assert first["trainable_parameters"] == params  # no LoRA: everything trains
    assert tracked["sharded_param"] == params * FP32 // 2  # each parameter split over 2 ranks
    assert tracked["opt"] == pytest.approx(2 * params * FP32 // 2, rel=1e-3)  # exp_avg(_sq)
    assert first["fits"] is True and first["peak_gib_per_gpu"] > sum(
        first["stated_gib"].values())
    again = fit_json(cli, job, "--gpu-memory", "1GB")
    assert again["cached"] is True and again["tracked_bytes"] == tracked
    cache = list((cli.home / "fit-cache").iterdir())
    assert len(cache) == 1 and cache[0].stat().st_mode & 0o077 == 0


def test_two_depths_carried_to_the_models_own_are_its_full_depth_measured(
        cli: Cli, tmp_path: Path) -> None:
    """A 12-layer model: measured at 4 and 8 layers and carried to 12, against all 12 measured."""
    job = tiny_job(tmp_path, "dtype: float32",
                   "activation_checkpointing: true, transformer_layer_cls_to_wrap: "
                   "[LlamaDecoderLayer]")
    config = tmp_path / "tiny-llama" / "config.json"
    config.write_text(config.read_text().replace('"num_hidden_layers": 4',
                                                 '"num_hidden_layers": 12'))
    carried, whole = fit_json(cli, job), fit_json(cli, job, "--every-layer")
    assert carried["layers"] == {"model": 12, "measured": [4, 8]}
    assert whole["layers"] == {"model": 12, "measured": [12]}
    assert carried["parameters"] == whole["parameters"]
    for category, measured in whole["tracked_bytes"].items():
        assert carried["tracked_bytes"][category] == pytest.approx(measured, rel=0.01,
                                                                   abs=1024), category


def test_lora_trains_only_the_adapters_and_qlora_packs_the_base_weights_in_4_bits(
        cli: Cli, tmp_path: Path) -> None:
    lora = fit_json(cli, tiny_job(tmp_path / "lora", "lora: {r: 4}"))
    adapters = lora["trainable_parameters"]
    assert 0 < adapters < lora["parameters"] / 10
    assert lora["tracked_bytes"]["opt"] == pytest.approx(2 * adapters * FP32 // 2, rel=1e-2)
    qlora = fit_json(cli, tiny_job(tmp_path / "qlora",
                                   "dtype: bfloat16, lora: {r: 4, quantize: nf4}"))
    assert qlora["trainable_parameters"] == adapters
    # the base weights of every Linear but the head: a quarter of their bf16 bytes
    assert qlora["tracked_bytes"]["sharded_param"] < lora["tracked_bytes"]["sharded_param"] / 2
    assert "4-bit quantization constants" in qlora["stated_gib"]


def test_a_job_without_a_fit_block_is_one_line_naming_it(cli: Cli, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: plain\nscript: train.py\n")
    proc = cli.run("fit", str(job), "--cluster", "local")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert str(job) in line and "fit" in line and "fit: {model: PATH}" in line, line


FIT_EXAMPLES = REPO / "examples" / "fit"
# PEFT's FSDP guide, per GPU (its "GB" taken as GiB, as nvidia-smi's MiB / 1024)
PUBLISHED_GIB = {"llama2-70b-lora": (72.0, 80.0), "llama2-70b-qlora": (35.6, 35.6),
                 "llama2-70b-qlora-offload": (19.6, 19.6)}
WITHIN = 0.15


def test_the_published_llama2_70b_set_ups_from_their_job_files(cli: Cli) -> None:
    """The three job files of examples/fit, each naming Llama-2-70B's public config.json (no
    weights), carried from 4 and 8 layers to 80. LoRA and QLoRA land within 15% of PEFT's
    published figures; with CPU offload the estimate is below the published 19.6 GiB (a missed
    target, docs/results.md): what it shows is what offload moves off the GPU."""
    got = {}
    for name in PUBLISHED_GIB:
        proc = cli.run("fit", str(FIT_EXAMPLES / f"{name}.yaml"), "--cluster", "local", "--json",
                       "--gpu-memory", "80GB", timeout=600)
        assert proc.returncode == 0, proc.stderr
        got[name] = json.loads(proc.stdout)
        assert got[name]["layers"] == {"model": 80, "measured": [4, 8]}
        assert got[name]["parameters"] == pytest.approx(68.98e9, rel=1e-3)
    for name in ("llama2-70b-lora", "llama2-70b-qlora"):
        low, high = PUBLISHED_GIB[name]
        peak = got[name]["peak_gib_per_gpu"]
        assert low * (1 - WITHIN) <= peak <= high * (1 + WITHIN), (name, peak)
    on, off = got["llama2-70b-qlora-offload"], got["llama2-70b-qlora"]
    assert on["cached"] is True  # offload moves what was measured: one measurement for both
    assert on["per_gpu_gib"]["parameters"] < off["per_gpu_gib"]["parameters"] / 4
    assert on["per_gpu_gib"]["activations"] == off["per_gpu_gib"]["activations"]
    assert on["cpu_ram_gib_per_node"] > 2 * off["per_gpu_gib"]["parameters"] * 0.9
