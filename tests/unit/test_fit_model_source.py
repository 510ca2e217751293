"""Where ``fit.model`` is found without the network: a path beside the job, else a model id in the
local Hugging Face cache laid out as huggingface_hub writes it (``models--org--name/refs/main`` and
``snapshots/REV/config.json``); a model id not there is one line naming the cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fsdp_orch.fit.model_source import config_file, model_text
from fsdp_orch.vocab.errors import InputError


def cached(hub: Path, model_id: str, revision: str, text: str) -> Path:
    folder = hub / ("models--" + model_id.replace("/", "--"))
    (folder / "snapshots" / revision).mkdir(parents=True)
    config = folder / "snapshots" / revision / "config.json"
    config.write_text(text)
    return config


def test_a_model_id_is_the_snapshot_refs_main_names(tmp_path: Path, monkeypatch) -> None:
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    old = cached(hub, "meta-llama/Llama-2-70b-hf", "aaa", '{"num_hidden_layers": 1}')
    main = cached(hub, "meta-llama/Llama-2-70b-hf", "bbb", '{"num_hidden_layers": 80}')
    os.utime(old, (2e9, 2e9))  # newer on disk, but not the revision refs/main names
    (hub / "models--meta-llama--Llama-2-70b-hf" / "refs").mkdir()
    (hub / "models--meta-llama--Llama-2-70b-hf" / "refs" / "main").write_text("bbb\n")
    assert config_file("meta-llama/Llama-2-70b-hf", str(tmp_path / "job")) == str(main)
    assert model_text("meta-llama/Llama-2-70b-hf", str(tmp_path / "job")) == (
        '{"num_hidden_layers": 80}')
    (hub / "models--meta-llama--Llama-2-70b-hf" / "refs" / "main").unlink()
    assert config_file("meta-llama/Llama-2-70b-hf", str(tmp_path)) == str(old)  # the newest


def test_a_path_beside_the_job_comes_before_the_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    cached(tmp_path / "hub", "org/model", "r", "{}")
    (tmp_path / "org" / "model").mkdir(parents=True)
    assert config_file("org/model", str(tmp_path)) == str(tmp_path / "org/model/config.json")


def test_a_model_id_not_cached_is_one_line_naming_the_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(InputError) as raised:
        model_text("org/not-here", str(tmp_path))
    message = str(raised.value)
    assert raised.value.field == "fit.model" and str(tmp_path / "hf" / "hub") in message
    assert "never downloads" in message and "\n" not in message


def test_the_fsdp_options_come_from_the_accelerate_config_the_job_names(tmp_path: Path) -> None:
    """PEFT's FSDP examples keep their FSDP options in an accelerate config
    (fsdp_config_qlora.yaml): fit reads the job as submit does, that config merged under the job's
    own fields."""
    from fsdp_orch.fit.setup import fit_setup
    from fsdp_orch.jobspec.loading import load_job

    (tmp_path / "accel.yaml").write_text(
        "distributed_type: FSDP\nmixed_precision: bf16\nnum_machines: 1\nnum_processes: 2\n"
        "fsdp_config:\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n  fsdp_offload_params: true\n"
        "  fsdp_activation_checkpointing: true\n"
        "  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n")
    job = tmp_path / "job.yaml"
    job.write_text("name: peft\nscript: train.py\nlauncher: accelerate\n"
                   "accelerate_config: accel.yaml\nfit: {model: config.json}\n")
    setup = fit_setup(load_job(job, [])[0], 8, str(job))
    assert (setup.strategy, setup.offload_params, setup.activation_checkpointing,
            setup.mixed_precision, setup.layer_classes, setup.world_size) == (
        "SHARD_GRAD_OP", True, True, "bf16", ("LlamaDecoderLayer",), 2)
