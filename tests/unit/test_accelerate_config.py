"""An existing ``accelerate config`` YAML maps into the job spec; job.yaml fields win."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from planning import CONTEXT, plan_on, render

from fsdp_orch.backends.registry import parse_profile
from fsdp_orch.jobspec.accelerate import accelerate_to_spec
from fsdp_orch.jobspec.loading import load_job
from fsdp_orch.places.builtin import builtin_dir
from fsdp_orch.vocab.errors import InputError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BERT = FIXTURES / "accelerate" / "fsdp_bert.yaml"


def job_file(tmp_path: Path, text: str = "name: bert\nscript: train.py\n") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_docs_example_maps_into_the_spec(tmp_path: Path) -> None:
    job, _ = load_job(job_file(tmp_path), accelerate_config=BERT)
    assert (job.nodes, job.procs_per_node) == (2, 8)
    f = job.fsdp
    assert f.sharding_strategy == "FULL_SHARD"
    assert f.auto_wrap_policy == "TRANSFORMER_BASED_WRAP"
    assert f.transformer_layer_cls_to_wrap == ["BertLayer"]
    assert f.backward_prefetch == "BACKWARD_PRE"
    assert f.mixed_precision == "bf16"
    assert f.cpu_ram_efficient_loading is True and f.offload_params is False
    assert f.state_dict_type == "SHARDED_STATE_DICT"
    assert f.sync_module_states is True and f.use_orig_params is True
    # No fsdp_version in the file: accelerate treats that as FSDP1, and so do we.
    assert f.version == 1
    assert job.accelerate_config == str(BERT)


def test_accelerate_config_key_is_relative_to_the_job_file(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "acc.yaml").write_text(BERT.read_text())
    path = job_file(tmp_path, "name: bert\nscript: train.py\naccelerate_config: conf/acc.yaml\n")
    monkeypatch.chdir("/")
    job, _ = load_job(path)
    assert job.fsdp.transformer_layer_cls_to_wrap == ["BertLayer"] and job.nodes == 2


def test_job_fields_win(tmp_path: Path) -> None:
    path = job_file(tmp_path, "name: bert\nscript: train.py\nnodes: 4\nprocs_per_node: 2\n"
                              "fsdp:\n  sharding_strategy: SHARD_GRAD_OP\n"
                              "  backward_prefetch: BACKWARD_POST\n  fsdp_mixed_precision: fp16\n"
                              "  version: 2\n")
    job, _ = load_job(path, accelerate_config=BERT)
    assert (job.nodes, job.procs_per_node) == (4, 2)
    assert job.fsdp.sharding_strategy == "SHARD_GRAD_OP"
    assert job.fsdp.backward_prefetch == "BACKWARD_POST"  # job's name beats the file's old alias
    assert job.fsdp.mixed_precision == "fp16"
    assert job.fsdp.version == 2
    assert job.fsdp.transformer_layer_cls_to_wrap == ["BertLayer"]  # not in job.yaml: from the file


def test_set_wins_over_both(tmp_path: Path) -> None:
    job, _ = load_job(job_file(tmp_path), ["fsdp.sharding_strategy=4", "nodes=3"],
                      accelerate_config=BERT)
    assert job.fsdp.sharding_strategy == "HYBRID_SHARD" and job.nodes == 3


@pytest.mark.parametrize(("written", "value"),
                         [("no", "no"), ("'no'", "no"), ("fp16", "fp16"), ("BF16", "bf16")])
def test_mixed_precision_spellings(tmp_path: Path, written: str, value: str) -> None:
    acc = tmp_path / "acc.yaml"
    acc.write_text(f"distributed_type: FSDP\nmixed_precision: {written}\nfsdp_config: {{}}\n")
    job, _ = load_job(job_file(tmp_path), accelerate_config=acc)
    assert job.fsdp.mixed_precision == value


def test_fsdp2_config(tmp_path: Path) -> None:
    acc = tmp_path / "acc.yaml"
    acc.write_text("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"
                   "  fsdp_reshard_after_forward: false\n  fsdp_activation_checkpointing: true\n"
                   "  fsdp_state_dict_type: FULL_STATE_DICT\n")
    job, _ = load_job(job_file(tmp_path), accelerate_config=acc)
    f = job.fsdp
    assert (f.version, f.reshard_after_forward, f.activation_checkpointing) == (2, False, True)
    assert f.state_dict_type == "FULL_STATE_DICT"


def test_not_fsdp_sets_only_the_counts() -> None:
    assert accelerate_to_spec({"distributed_type": "MULTI_GPU", "num_machines": 1,
                               "num_processes": 4},
                              "a.yaml") == {"nodes": 1, "procs_per_node": 4}


def test_xla_config() -> None:
    out = accelerate_to_spec({"distributed_type": "XLA", "fsdp_config": {}}, "a.yaml")
    assert out["fsdp"]["xla"] is True


def test_uneven_processes(tmp_path: Path) -> None:
    acc = tmp_path / "acc.yaml"
    acc.write_text("num_machines: 3\nnum_processes: 16\n")
    with pytest.raises(InputError, match="not a multiple") as info:
        load_job(job_file(tmp_path), accelerate_config=acc)
    assert info.value.file == str(acc) and info.value.field == "num_processes"


def test_errors_point_into_the_accelerate_config(tmp_path: Path) -> None:
    acc = tmp_path / "acc.yaml"
    acc.write_text("distributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: maybe\n")
    with pytest.raises(InputError) as info:
        load_job(job_file(tmp_path), accelerate_config=acc)
    err = info.value
    assert (err.file, err.line, err.field) == (str(acc), 3, "fsdp_config.fsdp_offload_params")
    acc.write_text("distributed_type: FSDP\nfsdp_config:\n  fsdp_shardng_strategy: 1\n")
    with pytest.raises(InputError, match="did you mean 'sharding_strategy'"):
        load_job(job_file(tmp_path), accelerate_config=acc)
    acc.write_text("fsdp_config: [a]\n")
    with pytest.raises(InputError, match="expected a mapping"):
        load_job(job_file(tmp_path), accelerate_config=acc)


def test_rendered_accelerate_config_reads_back_the_same(tmp_path: Path) -> None:
    """The accelerate_config.yaml we write, fed back in, gives the same FSDP options."""
    job, _ = load_job(job_file(tmp_path), ["launcher=accelerate"], accelerate_config=BERT)
    profile = parse_profile(FIXTURES / "clusters" / "slurm.yaml")
    plan = plan_on(job, profile, "slurm", CONTEXT)
    (art,) = [a for a in render(plan, search=[builtin_dir("templates")])
              if a.name == "accelerate_config.yaml"]
    rendered = yaml.safe_load(art.text)
    assert rendered["distributed_type"] == "FSDP"
    assert (rendered["num_machines"], rendered["num_processes"]) == (2, 16)
    back = tmp_path / "back.yaml"
    back.write_text(art.text)
    again, _ = load_job(job_file(tmp_path), ["launcher=accelerate"], accelerate_config=back)
    for name in ("sharding_strategy", "auto_wrap_policy", "transformer_layer_cls_to_wrap",
                 "backward_prefetch", "mixed_precision", "state_dict_type", "offload_params",
                 "version", "use_orig_params"):
        assert getattr(again.fsdp, name) == getattr(job.fsdp, name), name
    assert (again.nodes, again.procs_per_node) == (job.nodes, job.procs_per_node)


@pytest.mark.parametrize(("has_gpu", "distributed_type"), [(False, "MULTI_CPU"), (True, "FSDP")])
def test_fsdp_on_a_machine_without_gpu_runs_as_multi_cpu_and_the_plan_says_so(
        tmp_path: Path, has_gpu: bool, distributed_type: str) -> None:
    """A local profile's ``device: auto``: the plan decides the config's distributed_type once and,
    where it is not the FSDP asked for, carries the one-line notice the config, submit, render and
    the events repeat."""
    from dataclasses import replace

    from fsdp_orch.launch.start_choices import ACCELERATE_FSDP_ON_CPU

    job, _ = load_job(job_file(tmp_path), ["launcher=accelerate", "nodes=1", "procs_per_node=2"],
                      accelerate_config=BERT)
    profile = parse_profile(FIXTURES / "clusters" / "local.yaml").model_copy(
        update={"device": "auto"})
    plan = plan_on(job, profile, "local", replace(CONTEXT, local_has_gpu=has_gpu))
    assert plan.accelerate_distributed_type == distributed_type
    assert plan.notices == (() if has_gpu else (ACCELERATE_FSDP_ON_CPU,))
    (art,) = [a for a in render(plan, search=[builtin_dir("templates")])
              if a.name == "accelerate_config.yaml"]
    rendered = yaml.safe_load(art.text)
    assert rendered["distributed_type"] == distributed_type and rendered["use_cpu"] is (not has_gpu)
    assert (f"# {ACCELERATE_FSDP_ON_CPU}\n" in art.text) is (not has_gpu)
    (launch,) = [a for a in render(plan, search=[builtin_dir("templates")])
                 if a.name == "launch.sh"]
    # Accelerate's torchrun path for CPU ranks
    assert ("--multi_gpu" in launch.text) is (not has_gpu)


def test_only_the_accelerate_launcher_has_a_distributed_type(tmp_path: Path) -> None:
    job, _ = load_job(job_file(tmp_path), ["nodes=1"], accelerate_config=BERT)
    plan = plan_on(job, parse_profile(FIXTURES / "clusters" / "local.yaml"), "local")
    assert (plan.launcher == "torchrun" and plan.accelerate_distributed_type is None
            and plan.notices == ())
