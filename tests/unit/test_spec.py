"""The job spec: defaults, accepted spellings, literal strings, --set, and what loading keeps
intact."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from fsdp_orch.jobspec.loading import apply_override, load_job, load_job_text
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.vocab.errors import InputError

REPO = Path(__file__).resolve().parents[2]
BASE = "name: demo\nscript: train.py\n"


def spec(extra: str = "") -> JobSpec:
    return load_job_text(BASE + extra)


def error(extra: str) -> InputError:
    with pytest.raises(InputError) as info:
        load_job_text(BASE + extra)
    return info.value


def test_example_job_loads() -> None:
    job, doc = load_job(REPO / "examples" / "demo" / "job.yaml")
    assert (job.name, job.script, job.nodes, job.procs_per_node) == ("demo", "train.py", 1, 2)
    assert job.args == ["--steps", "200", "--seq-len", "64"]
    assert job.restart.backoff.max == 30
    assert doc.line_of(("restart", "crash_loop_attempts")) is not None


def test_defaults() -> None:
    job = spec()
    assert job.launcher == "torchrun" and job.nodes == 1 and job.procs_per_node is None
    assert job.fsdp.sharding_strategy == "FULL_SHARD" and job.fsdp.version == 2
    assert job.fsdp.mixed_precision == "no"
    assert job.restart.max_restarts is None and job.restart.crash_loop_attempts == 3
    assert job.watch.heartbeat_timeout == 300
    assert job.entry == ("script", "train.py")


def test_spec_is_immutable() -> None:
    with pytest.raises(ValidationError):
        spec().nodes = 4  # type: ignore[misc]


@pytest.mark.parametrize(("written", "strategy"), [
    ("1", "FULL_SHARD"), ("2", "SHARD_GRAD_OP"), ("3", "NO_SHARD"), ("4", "HYBRID_SHARD"),
    ("5", "HYBRID_SHARD_ZERO2"), ("full_shard", "FULL_SHARD"), (" Hybrid_Shard ", "HYBRID_SHARD"),
])
def test_sharding_strategy_spellings(written: str, strategy: str) -> None:
    assert spec(f"fsdp: {{sharding_strategy: {written!r}}}\n" if " " in written else
                f"fsdp: {{sharding_strategy: {written}}}\n").fsdp.sharding_strategy == strategy


@pytest.mark.parametrize("bad", ["0", "6", "true", "ZERO3", "[1]"])
def test_bad_sharding_strategy(bad: str) -> None:
    err = error(f"fsdp: {{sharding_strategy: {bad}}}\n")
    assert err.field == "fsdp.sharding_strategy"
    assert "expected 'FULL_SHARD'" in err.detail


def test_fsdp_prefix_is_accepted() -> None:
    job = spec("fsdp:\n  fsdp_sharding_strategy: 2\n  fsdp_offload_params: true\n"
               "  fsdp_backward_prefetch_policy: BACKWARD_POST\n"
               "  fsdp_transformer_layer_cls_to_wrap: A, B\n")
    assert job.fsdp.sharding_strategy == "SHARD_GRAD_OP"
    assert job.fsdp.offload_params is True
    assert job.fsdp.backward_prefetch == "BACKWARD_POST"
    assert job.fsdp.transformer_layer_cls_to_wrap == ["A", "B"]


def test_fsdp_key_given_twice() -> None:
    err = error("fsdp: {sharding_strategy: 1, fsdp_sharding_strategy: 2}\n")
    assert "given twice" in err.detail and err.field == "fsdp"


@pytest.mark.parametrize(("written", "value"), [
    ("no", "no"), ("'no'", "no"), ("false", "no"), ("null", "no"), ("bf16", "bf16"),
    ("FP16", "fp16"),
])
def test_mixed_precision(written: str, value: str) -> None:
    assert spec(f"fsdp: {{mixed_precision: {written}}}\n").fsdp.mixed_precision == value


def test_unquoted_scalars_keep_their_text_in_args_command_and_env() -> None:
    job = spec("args: [--lr, 1.10, --flag, yes, --n, 0x1F, 1_000, 1.0e+3, off]\n"
               "env: {PYVER: 3.10, DEBUG: on, N: 010, S: 'quoted'}\n")
    assert job.args == ["--lr", "1.10", "--flag", "yes", "--n", "0x1F", "1_000", "1.0e+3", "off"]
    assert job.env == {"PYVER": "3.10", "DEBUG": "on", "N": "010", "S": "quoted"}
    cmd = load_job_text("name: a\ncommand: [run, 2.50, true]\n")
    assert cmd.command == ["run", "2.50", "true"]


def test_command_as_a_string_is_split_like_a_shell() -> None:
    job = load_job_text("name: a\ncommand: \"./run.sh --msg 'two words' x\"\n")
    assert job.command == ["./run.sh", "--msg", "two words", "x"]
    assert job.entry == ("command", "./run.sh")
    with pytest.raises(InputError, match="cannot split command"):
        load_job_text("name: a\ncommand: \"./run.sh 'unbalanced\"\n")


def test_module_entry() -> None:
    job = load_job_text("name: a\nmodule: pkg.train\nargs: [x]\n")
    assert job.entry == ("module", "pkg.train")


@pytest.mark.parametrize("extra", [
    "args: [\"a\\0b\"]\n", "env: {A: \"x\\0\"}\n", "workdir: \"/tmp/\\0\"\n",
    "checkpoint: {dir: \"c\\0\"}\n",
])
def test_nul_bytes_are_refused(extra: str) -> None:
    assert "NUL" in error(extra).detail


def test_non_json_settings_are_refused() -> None:
    assert (error("fsdp: {xla_fsdp_settings: {a: !!binary /w==}}\n").field
            == "fsdp.xla_fsdp_settings")


@pytest.mark.parametrize("name", ["1BAD", "A-B", "A B", "", "É"])
def test_env_names(name: str) -> None:
    err = error(f"env: {{{name!r}: x}}\n")
    assert err.field == "env" and "not a valid shell name" in err.detail


def test_loading_does_not_mutate_the_document(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(BASE + "args: [1.10]\nenv: {A: 1}\n")
    _, doc = load_job(path, ["env.B=2", "nodes=1"])
    assert doc.data["args"] == [1.1] and doc.data["env"] == {"A": 1}


# --- --set ------------------------------------------------------------------------------------

def test_set_parses_yaml_values() -> None:
    data = apply_override({"name": "a"}, "restart.max_restarts=5")
    data = apply_override(data, "args=[--steps, 10]")
    data = apply_override(data, "fsdp.offload_params=true")
    assert data == {"name": "a", "restart": {"max_restarts": 5}, "args": ["--steps", 10],
                    "fsdp": {"offload_params": True}}


def test_set_env_values_are_literal() -> None:
    data = apply_override({}, "env.FOO=$(x) `y` 'z' 1.10 yes")
    assert data == {"env": {"FOO": "$(x) `y` 'z' 1.10 yes"}}
    assert apply_override({}, "env={A: 1}") == {"env": {"A": 1}}


def test_set_does_not_mutate_its_input() -> None:
    data = {"restart": {"max_restarts": 1}}
    apply_override(data, "restart.max_restarts=5")
    assert data == {"restart": {"max_restarts": 1}}


def test_set_not_yaml_is_taken_as_text() -> None:
    assert apply_override({}, "name=[unclosed") == {"name": "[unclosed"}
    assert apply_override({}, "name=") == {"name": ""}


@pytest.mark.parametrize("item", ["nodes", "=3", ".x=1", "a..b=1", "a.=1", " =1"])
def test_set_syntax_errors(item: str) -> None:
    with pytest.raises(InputError, match="expected KEY.PATH=VALUE") as info:
        apply_override({}, item)
    assert info.value.file == "--set"


def test_set_errors_name_the_set(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(BASE)
    with pytest.raises(InputError) as info:
        load_job(path, ["restart.max_restart=5"])
    assert info.value.file == "--set"
    assert "did you mean 'max_restarts'" in str(info.value)
    job, _ = load_job(path, ["restart.max_restarts=5", "nodes=2", "restart.max_restarts=7"])
    assert job.restart.max_restarts == 7 and job.nodes == 2


def test_errors_in_the_file_still_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(BASE + "nodes: zero\n")
    with pytest.raises(InputError) as info:
        load_job(path, ["restart.max_restarts=5"])
    assert (info.value.file, info.value.line, info.value.field) == (str(path), 3, "nodes")


def test_odd_keys_keep_messages_on_one_line() -> None:
    err = error('"a\\nb": 1\n')  # a key with a real line break in it
    assert "\n" not in str(err) and "'a\\nb'" in str(err)


def test_resume_args_placeholders_are_checked() -> None:
    assert spec('checkpoint: {resume_args: ["--resume", "{checkpoint}", "{step}"]}\n'
                ).checkpoint.resume_args == ["--resume", "{checkpoint}", "{step}"]
    exc = error('checkpoint: {resume_args: ["--resume", "{ckpt}"]}\n')
    assert exc.field == "checkpoint.resume_args.1" or "resume_args" in str(exc)
    assert "{ckpt}" in str(exc) and "{checkpoint}" in str(exc)


def test_a_bad_fault_spec_is_an_input_error_not_a_silent_no_op() -> None:
    assert spec("env: {FSDP_ORCH_FAULT: 'hang:step=3:rank=1'}\n").env["FSDP_ORCH_FAULT"]
    exc = error("env: {FSDP_ORCH_FAULT: 'hang:step=3'}\n")
    assert "env" in str(exc) and "rank=N is required" in str(exc)


@pytest.mark.parametrize(("written", "low", "high"), [
    ("2", 2, 2), ("1-2", 1, 2), ("'2-3'", 2, 3), (" 1 - 4", 1, 4), ("'3-3'", 3, 3), ("'2'", 2, 2)])
def test_nodes_is_a_count_or_an_elastic_range(written: str, low: int, high: int) -> None:
    job = spec(f"nodes: {written}\n")
    assert (job.min_nodes, job.nodes) == (low, high)  # nodes stays the (largest) count
    assert job.nodes_text == (str(high) if low == high else f"{low}-{high}")
    again = JobSpec.model_validate(job.model_dump(mode="json"))  # submission.json, job.json
    assert (again.min_nodes, again.nodes) == (low, high)
    assert job.model_dump(mode="json")["nodes"] == (high if low == high else f"{low}-{high}")


@pytest.mark.parametrize(("written", "expected"), [
    ("3-1", "1 <= MIN <= MAX"), ("0-2", "1 <= MIN <= MAX"),
    ("'1-'", "a node count (2) or an elastic range"),
    ("a-b", "a node count (2) or an elastic range"),
    ("two", "a node count (2) or an elastic range"), ("0", "greater than 0")])
def test_a_bad_node_range_names_the_field_and_what_was_expected(written: str,
                                                                expected: str) -> None:
    exc = error(f"nodes: {written}\n")
    assert exc.field == "nodes" and exc.line == 3 and expected in str(exc), str(exc)


def test_set_nodes_takes_a_range_and_its_errors_name_the_set(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(BASE + "nodes: 2\n")
    job, _ = load_job(path, ["nodes=1-2"])
    assert (job.min_nodes, job.nodes) == (1, 2)
    with pytest.raises(InputError) as info:
        load_job(path, ["nodes=2-1"])
    assert ((info.value.file, info.value.field) == ("--set", "nodes")
            and "MIN <= MAX" in str(info.value))


CONTROLS = [chr(c) for c in range(0x20)] + ["\x7f"]


@pytest.mark.parametrize("char", CONTROLS, ids=[f"0x{ord(c):02x}" for c in CONTROLS])
def test_a_name_with_any_control_character_is_refused(char: str) -> None:
    """A line break in the name broke the status table; every C0 control and DEL is refused."""
    with pytest.raises(InputError) as info:
        load_job_text(BASE.replace("name: demo", "name: " + json_str("de" + char + "mo")))
    assert info.value.field == "name" and "control characters" in info.value.detail, info.value


def test_a_name_in_any_script_without_control_characters_is_kept() -> None:
    for name in ("golden demo", "é ünicode ☃", "a;b $(x) `y` 'q'", "日本語のジョブ"):
        assert load_job_text(BASE.replace("name: demo", "name: " + json_str(name))).name == name


def json_str(text: str) -> str:
    """``text`` as a YAML double-quoted scalar (JSON's escapes are YAML's)."""
    import json

    return json.dumps(text)
