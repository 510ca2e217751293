"""``fsdp-orch fit`` end to end on a small Llama built from its config (no hub, no weights): the
real ``fully_shard`` over a fake process group of 2 ranks, under ``FakeTensorMode`` and
``FSDPMemTracker``, in the CLI's own process. What the tracker counts is checked against what the
shapes say (FSDP shards each parameter over the ranks; AdamW keeps two values a trainable one),
with LoRA (only the adapters train) and QLoRA (the base weights in 4 bits); a second run is taken
from the cache; a job without a ``fit:`` block is one line, exit 2."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import REPO, Cli, make_cli
from sweep import cases

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


def lora_job(strategy: str = "FULL_SHARD", version: int = 2, fit: str = "",
             lora: str = "") -> str:
    """2 nodes x 2 ranks, LoRA on the tiny Llama: FSDP1 with its flat parameters
    (use_orig_params false, as accelerate's QLoRA configs set it; FSDP2 has no such option)."""
    flat = ", use_orig_params: false" if version == 1 else ""
    return ("name: s\nscript: train.py\nnodes: 2\nprocs_per_node: 2\n"
            f"fsdp: {{mixed_precision: 'no', sharding_strategy: {strategy}, version: {version}"
            f"{flat}}}\n"
            f"fit: {{model: tiny-llama, batch_size: 2, seq_len: 64, {fit}lora: {{r: 8{lora}}}}}\n")


@pytest.fixture(scope="module")
def lora_estimates(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict]:
    """``fit --json`` of a job file's text (``lora_job``), measured once a module in a home of its
    own: the LoRA test's job is the sharding test's FSDP2 full shard (one cold estimate for
    both)."""
    base = tmp_path_factory.mktemp("lora")
    shutil.copytree(TINY, base / "tiny-llama")
    cli = make_cli(base)
    got: dict[str, dict] = {}

    def answer(text: str) -> dict:
        if text not in got:
            job = base / f"job-{len(got)}.yaml"
            job.write_text(text)
            got[text] = fit_json(cli, job)
        return got[text]

    return answer


def test_two_depths_carried_to_the_models_own_are_its_full_depth_measured(
        cli: Cli, tmp_path: Path) -> None:
    """A 20-layer model: measured at 4, 8 and 12 layers and carried to 20 from 8 and 12 (4 on
    their line: no bound said), against all 20 measured."""
    job = tiny_job(tmp_path, "dtype: float32",
                   "activation_checkpointing: true, transformer_layer_cls_to_wrap: "
                   "[LlamaDecoderLayer]")
    config = tmp_path / "tiny-llama" / "config.json"
    config.write_text(config.read_text().replace('"num_hidden_layers": 4',
                                                 '"num_hidden_layers": 20'))
    carried, whole = fit_json(cli, job), fit_json(cli, job, "--every-layer")
    assert carried["layers"] == {"model": 20, "measured": [4, 8, 12]}
    assert not any("lower bound" in note for note in carried["notes"])
    assert whole["layers"] == {"model": 20, "measured": [20]}
    assert carried["parameters"] == whole["parameters"]
    for category, measured in whole["tracked_bytes"].items():
        assert carried["tracked_bytes"][category] == pytest.approx(measured, rel=0.01,
                                                                   abs=1024), category


def test_lora_trains_only_the_adapters_and_qlora_packs_the_base_weights_in_4_bits(
        lora_estimates: Callable[[str], dict]) -> None:
    lora = lora_estimates(lora_job())
    assert lora["ranks"] == 4
    adapters = lora["trainable_parameters"]
    assert 0 < adapters < lora["parameters"] / 10
    assert lora["tracked_bytes"]["opt"] == pytest.approx(2 * adapters * FP32 // 4, rel=1e-2)
    qlora = lora_estimates(lora_job(fit="dtype: bfloat16, ", lora=", quantize: nf4"))
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
# the suite: QLoRA, and with CPU offload from its measurement; LoRA (a measurement of its own,
# 100-145 s on a loaded CI machine) under bench/sweeps.py
SET_UPS = cases(PUBLISHED_GIB, ("llama2-70b-qlora", "llama2-70b-qlora-offload"))


def test_the_published_llama2_70b_set_ups_from_their_job_files(cli: Cli) -> None:
    """The three job files of examples/fit, each naming Llama-2-70B's public config.json (no
    weights), carried from 8 and 12 layers to 80. LoRA and QLoRA land within 15% of PEFT's
    published figures; with CPU offload the estimate is below the published 19.6 GiB (a missed
    target, docs/results.md): what it shows is what offload moves off the GPU."""
    got = {}
    for name in SET_UPS:
        proc = cli.run("fit", str(FIT_EXAMPLES / f"{name}.yaml"), "--cluster", "local", "--json",
                       "--gpu-memory", "80GB", timeout=600)
        assert proc.returncode == 0, proc.stderr
        got[name] = json.loads(proc.stdout)
        assert got[name]["layers"]["measured"] == [4, 8, 12]
        assert got[name]["parameters"] == pytest.approx(68.98e9, rel=1e-3)
    for name in set(SET_UPS) - {"llama2-70b-qlora-offload"}:
        low, high = PUBLISHED_GIB[name]
        peak = got[name]["peak_gib_per_gpu"]
        assert low * (1 - WITHIN) <= peak <= high * (1 + WITHIN), (name, peak)
    on, off = got["llama2-70b-qlora-offload"], got["llama2-70b-qlora"]
    assert on["cached"] is True  # offload moves what was measured: one measurement for both
    assert on["per_gpu_gib"]["parameters"] < off["per_gpu_gib"]["parameters"] / 4
    assert on["per_gpu_gib"]["activations"] == off["per_gpu_gib"]["activations"]
    assert on["cpu_ram_gib_per_node"] > 2 * off["per_gpu_gib"]["parameters"] * 0.9


STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
# the suite: the four strategies the optimizer's split tells apart, on FSDP2, and FSDP1's full
# shard against FSDP2's; every strategy on both (ten cold estimates, 300 s on a loaded CI machine)
# under bench/sweeps.py
SHARDINGS = cases([(version, strategy) for version in (1, 2) for strategy in STRATEGIES],
                  [(1, "FULL_SHARD"), *((2, strategy) for strategy in STRATEGIES[:4])])


def test_every_sharding_strategy_on_fsdp1_and_fsdp2_gets_an_estimate_as_it_shards(
        lora_estimates: Callable[[str], dict]) -> None:
    """2 nodes x 2 ranks, LoRA on the tiny Llama: each of the five strategies the job spec takes,
    on FSDP2 and on FSDP1's flat parameters (use_orig_params false, as accelerate's QLoRA configs
    set it). The optimizer's state is split over the ranks a strategy shards over: 4, 2 (HSDP's
    2 a node) or 1 (NO_SHARD); and FSDP1 answers differently from FSDP2."""
    got: dict[tuple[int, str], dict] = {}
    for version, strategy in SHARDINGS:
        answer = lora_estimates(lora_job(strategy, version))
        assert answer["ranks"] == 4 and answer["peak_gib_per_gpu"] > 0, (version, strategy)
        assert answer["max_memory_allocated_gib"] <= answer["max_memory_reserved_gib"] \
            <= answer["peak_gib_per_gpu"]
        got[version, strategy] = answer["tracked_bytes"]
    for version in {version for version, strategy in SHARDINGS if strategy == "NO_SHARD"}:
        opt = {s: got[version, s]["opt"] for s in STRATEGIES[:4]}
        assert opt["NO_SHARD"] == pytest.approx(4 * opt["FULL_SHARD"], rel=0.05), opt
        assert opt["HYBRID_SHARD"] == pytest.approx(2 * opt["FULL_SHARD"], rel=0.05), opt
        assert opt["SHARD_GRAD_OP"] == opt["FULL_SHARD"]
        # without resharding after forward, the gathered parameters stay: a higher peak
        assert got[version, "SHARD_GRAD_OP"]["total"] > got[version, "FULL_SHARD"]["total"]
    assert "param" in got[1, "FULL_SHARD"] and "all_gather" in got[2, "FULL_SHARD"]
    assert got[1, "FULL_SHARD"]["total"] != got[2, "FULL_SHARD"]["total"]


# Published figures held to their tolerance here, one or two from each project
# (tests/fit_published.py writes each one's job file; tests/fixtures/fit/published/FIGURES.md has
# each source and the line it was read from). The 17 of fit_published.TOLERANCE, each with its
# tolerance (15%, or the error a known miss has, so that it cannot grow), are
# `.venv/bin/python bench/fit_published.py --held`: 17 cold estimates took 600 s of the suite on a
# loaded CI machine.
# The suite holds one figure on FSDP1 and one on FSDP2 (and the latter's twin from the cache); the
# 70B measurements (a known miss among them) are left to bench/sweeps.py: a peak's tolerance is a
# memory target, and each 70B estimate took 60-100 s of a loaded CI run.
PUBLISHED_HERE = cases((
    "aai-3090-llama2-7b-qlora-bs1-ctx2048",  # Answer.AI's fsdp_qlora: FSDP1, QLoRA, reserved
    "aai-3090-llama2-70b-qlora-cpuoffload-bs2-ctx2048",  # its CPU offload: a known miss, held
    "torchtune-llama3.1-70b-lora-8xa100",  # torchtune's README: FSDP2, 70B, allocated
    "torchtitan-llama3.1-8b-fsdp-8xh100",  # torchtitan's benchmark: pre-training, 8B
    "torchtitan-llama3.1-8b-fsdp-compile-8xh100",  # the same measurement, from the cache
), in_suite=("aai-3090-llama2-7b-qlora-bs1-ctx2048", "torchtitan-llama3.1-8b-fsdp-8xh100",
             "torchtitan-llama3.1-8b-fsdp-compile-8xh100"))


def test_the_estimate_is_within_its_tolerance_of_published_peaks_on_fsdp1_and_fsdp2(
        cli: Cli, tmp_path: Path) -> None:
    """Published peaks (Answer.AI's fsdp_qlora on FSDP1, torchtitan's Llama 3.1 8B benchmark on
    FSDP2; under bench/sweeps.py torchtune's README too), each from its job file as a user writes
    it, through `fsdp-orch fit --json`, compared in the statistic its source reports
    (max_memory_reserved, max_memory_allocated). A figure that shares a measurement (the same job
    but torch.compile, which is named as not modelled) is read from the cache."""
    from fit_published import TOLERANCE, compared, estimated, figure

    env = {**cli.env, "OMP_NUM_THREADS": "1"}
    fsdp_orch = str(REPO / ".venv" / "bin" / "fsdp-orch")
    for figure_id in PUBLISHED_HERE:
        published = figure(figure_id)
        assert published["source"].startswith("https://") and published["quote"], figure_id
        answer = estimated(published, tmp_path, env=env, fsdp_orch=fsdp_orch)
        assert answer["parameters"] > 1e9, figure_id
        got, error = compared(published, answer)
        assert abs(error) <= TOLERANCE[figure_id], (figure_id, published["published_gib"], got,
                                                    error)
        assert answer["cached"] is figure_id.endswith("-compile-8xh100"), figure_id
