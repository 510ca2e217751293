"""Hypothesis: any input either loads or raises our InputError, never another exception.

Covers the text loader, the file loader (arbitrary bytes), structured documents built from the
real field names with values of every YAML type, ``--set`` overrides, cluster profiles, and
planning + rendering of whatever loads.
"""

from __future__ import annotations

import os
import string
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planning import SUPERVISOR, plan_on, render
from pydantic import BaseModel

from fsdp_orch.backends.registry import parse_profile, profile_models
from fsdp_orch.jobspec.loading import load_job, load_job_text
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.launch.plan_inputs import PlanContext
from fsdp_orch.places.builtin import builtin_dir
from fsdp_orch.vocab.errors import InputError

# FSDP_ORCH_FUZZ_EXAMPLES=5000 for a longer hunt; the default keeps the unit suite fast.
FUZZ = settings(max_examples=int(os.environ.get("FSDP_ORCH_FUZZ_EXAMPLES", "200")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
TMP = Path(tempfile.mkdtemp(prefix="fsdp-orch-fuzz-"))
BUILTIN_PROFILES = {kind: parse_profile(builtin_dir("clusters") / f"{kind}.yaml")
                    for kind in profile_models()}


def loads_or_input_error(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except InputError as exc:
        assert str(exc)  # a message, and one line of it
        assert "\n" not in str(exc), str(exc)
        return None


def _field_names(model: type[BaseModel]) -> list[str]:
    names = list(model.model_fields)
    for info in model.model_fields.values():
        ann = info.annotation
        for arg in (*getattr(ann, "__args__", ()), ann):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                names += _field_names(arg)
    return names


NAMES = sorted(set(_field_names(JobSpec))
               | {f"fsdp_{n}" for n in _field_names(JobSpec)
                  if n in JobSpec.model_fields["fsdp"].annotation.model_fields})
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["90s", "1h30m", "FULL_SHARD", "1", "0", "-1", "bf16", "no",
                     "torchrun", "xla", "$(x)", "", "train.py", "a b", "10m"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(NAMES), inner, max_size=3)),
    max_leaves=6)
documents = st.dictionaries(st.sampled_from(NAMES) | st.text(max_size=6), values, max_size=6)
# Most structured documents should get past the entry-point check to reach deeper validation.
rooted = documents.map(lambda d: {"name": "fuzz", "script": "t.py", **d})
yaml_ish = st.text(alphabet=string.printable + "é☃\u2028\t", max_size=200)


@FUZZ
@given(st.text(max_size=300))
def test_any_text(text: str) -> None:
    result = loads_or_input_error(load_job_text, text)
    assert result is None or isinstance(result, JobSpec)


@FUZZ
@given(yaml_ish)
def test_yaml_looking_text(text: str) -> None:
    result = loads_or_input_error(load_job_text, text)
    assert result is None or isinstance(result, JobSpec)


@FUZZ
@given(st.binary(max_size=300))
def test_any_bytes_as_a_file(data: bytes) -> None:
    path = TMP / "bytes.yaml"
    path.write_bytes(data)
    result = loads_or_input_error(load_job, path)
    assert result is None or isinstance(result[0], JobSpec)


def _dump(doc: dict[str, Any]) -> str:
    return yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), allow_unicode=True,
                     sort_keys=False)


@FUZZ
@given(documents)
def test_structured_documents(doc: dict[str, Any]) -> None:
    result = loads_or_input_error(load_job_text, _dump(doc))
    assert result is None or isinstance(result, JobSpec)


@FUZZ
@given(rooted, st.sampled_from(sorted(BUILTIN_PROFILES)))
def test_whatever_loads_plans_and_renders(doc: dict[str, Any], kind: str) -> None:
    job = loads_or_input_error(load_job_text, _dump(doc))
    if job is None:
        return
    ctx = PlanContext(job_id="fuzz", attempt=0, run_root="/h", job_dir="/j",
                      supervisor_command=SUPERVISOR)
    plan = loads_or_input_error(plan_on, job, BUILTIN_PROFILES[kind], kind, ctx)
    if plan is None:
        return
    artifacts = loads_or_input_error(render, plan, search=[builtin_dir("templates")])
    assert artifacts is None or all(a.text for a in artifacts)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(NAMES + ["env.X", "restart.max_restarts", "fsdp.version",
                                                   "a..b", ""]),
                          st.sampled_from(["=", "", "=="]), st.text(max_size=10)), max_size=3))
def test_set_overrides(items: list[tuple[str, str, str]]) -> None:
    path = TMP / "job.yaml"
    path.write_text("name: fuzz\nscript: t.py\n")
    result = loads_or_input_error(load_job, path, [k + sep + v for k, sep, v in items])
    assert result is None or isinstance(result[0], JobSpec)


PROFILE_NAMES = sorted({n for m in profile_models().values() for n in m.model_fields}
                       | {"address", "port"})
profiles = st.dictionaries(st.sampled_from(PROFILE_NAMES), values, max_size=6).map(
    lambda d: {"kind": d.pop("kind", None) or "slurm", **d})


@FUZZ
@given(profiles | st.fixed_dictionaries({"kind": st.sampled_from(sorted(profile_models()))}))
def test_profiles(doc: dict[str, Any]) -> None:
    path = TMP / "profile.yaml"
    path.write_text(_dump(doc))
    loads_or_input_error(parse_profile, path)
