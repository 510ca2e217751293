"""Secrets by reference (pure parts and the private-home store): a reference is read only at submit,
never shown, and a plain value whose name says it is a secret is shown as ***."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from planning import plan_on

from fsdp_orch.jobspec.loading import load_job_text
from fsdp_orch.jobspec.notify import Webhook
from fsdp_orch.jobspec.secrets import SecretRef, resolve, resolve_submission
from fsdp_orch.launch.plan import shown_plan
from fsdp_orch.launch.plan_inputs import PlanContext
from fsdp_orch.vocab.errors import InputError
from fsdp_orch.vocab.redact import MASK, masked, shown_event, shown_spec

JOB = "name: demo\nscript: train.py\n"


def test_a_reference_is_kept_as_written_and_read_back() -> None:
    job = load_job_text(JOB + "env:\n  HF_TOKEN: {from_env: MY_HF}\n  N: 3\n")
    doc = job.model_dump(mode="json")
    assert doc["env"] == {"HF_TOKEN": {"from_env": "MY_HF"}, "N": "3"}
    assert load_job_text(JOB + "env: " + json.dumps(doc["env"]) + "\n").env == job.env


def test_from_env_reads_the_submitting_environment_and_names_the_field_when_unset() -> None:
    ref = SecretRef(from_env="MY_HF")
    assert resolve(ref, {"MY_HF": "hf-value"}, "env.HF_TOKEN") == "hf-value"
    with pytest.raises(InputError) as raised:
        resolve(ref, {}, "env.HF_TOKEN")
    assert raised.value.field == "env.HF_TOKEN" and "MY_HF" in str(raised.value)


def test_from_file_wants_a_private_file_of_ones_own_and_drops_the_last_line_break(
        tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("Bearer abc123\n")
    secret.chmod(0o600)
    assert resolve(SecretRef(from_file="token"), {}, "f", str(tmp_path)) == "Bearer abc123"
    secret.chmod(0o640)
    with pytest.raises(InputError) as raised:
        resolve(SecretRef(from_file=str(secret)), {}, "notify.0.headers.Authorization")
    assert "chmod 600" in str(raised.value) and "abc123" not in str(raised.value)
    secret.chmod(0o600)
    secret.write_bytes(b"x" * (64 * 1024 + 1))
    with pytest.raises(InputError, match="larger than"):
        resolve(SecretRef(from_file=str(secret)), {}, "f")


def test_a_header_read_from_a_file_may_not_split_the_request(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("Bearer abc\r\nX-Evil: 1\n")
    secret.chmod(0o600)
    job = load_job_text(JOB + "notify:\n  - url: http://h/x\n"
                              "    headers: {Authorization: {from_file: token}}\n")
    profile = type("P", (), {"env": {}, "notify": []})()
    with pytest.raises(InputError) as raised:
        resolve_submission(profile, job, {}, str(tmp_path / "job.yaml"), "/p.yaml")
    assert (raised.value.field == "notify.0.headers.Authorization"
            and "carriage return" in str(raised.value))
    assert raised.value.file == str(tmp_path / "job.yaml")


def test_the_profile_reference_is_named_in_the_profile_file() -> None:
    job = load_job_text(JOB)
    profile = type("P", (),
                   {"env": {"HF_TOKEN": SecretRef(from_env="NOT_SET_HERE")}, "notify": []})()
    with pytest.raises(InputError) as raised:
        resolve_submission(profile, job, {}, "/j/job.yaml", "/c/mine.yaml")
    assert raised.value.file == "/c/mine.yaml" and raised.value.field == "env.HF_TOKEN"


def test_what_is_shown_of_a_spec() -> None:
    doc = {"env": {"HF_TOKEN": {"from_env": "MY_HF"}, "WANDB_API_KEY": "wb-123",
                   "db_password": "pw", "WANDB_PROJECT": "p"},
           "notify": [{"url": "u", "headers": {"Authorization": "Bearer x", "X-Team": "ml",
                                               "X-Api-Token": {"from_file": "/t"}}}]}
    shown = shown_spec(doc)
    assert shown["env"] == {
        "HF_TOKEN": {"from_env": "MY_HF"}, "WANDB_API_KEY": MASK, "db_password": MASK,
        "WANDB_PROJECT": "p"}
    assert shown["notify"][0]["headers"] == {"Authorization": MASK, "X-Team": "ml",
                                             "X-Api-Token": {"from_file": "/t"}}
    event = {"kind": "submitted", "spec_json": json.dumps(doc)}
    assert ("wb-123" not in json.dumps(shown_event(event))
            and "Bearer x" not in json.dumps(shown_event(event)))
    assert shown_event({"kind": "submitted", "spec_json": "not json wb-123"})["spec_json"] == MASK


def test_masking_free_text() -> None:
    assert masked("token=hf-abcdef and hf-abcdef", ["hf-abcdef", "1"]) == "token=*** and ***"


def test_render_shows_where_a_value_comes_from_never_a_value(tmp_path: Path) -> None:
    from planning import render

    from fsdp_orch.backends.registry import parse_profile

    profile_file = tmp_path / "local.yaml"
    profile_file.write_text("kind: local\npython: /py\n")
    job = load_job_text(JOB + "env:\n  HF_TOKEN: {from_env: MY_HF}\n  WANDB_API_KEY: wb-plain-123\n"
                        "notify:\n  - url: http://h/x\n"
                        "    headers: {Authorization: Bearer plain-456}\n")
    plan = plan_on(job, parse_profile(profile_file), "local",
                   PlanContext(job_id="j", attempt=0, run_root="/h", job_dir="/j"))
    assert ("WANDB_API_KEY", "wb-plain-123") in plan.env  # what the private launch script exports
    text = "".join(a.text for a in render(shown_plan(plan)))
    assert "wb-plain-123" not in text and "plain-456" not in text
    assert "from_env MY_HF" in text and "export WANDB_API_KEY='***'" in text


def test_values_cross_the_ssh_channel_as_shell_lines_a_shell_reads_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from fsdp_orch.backends.over_ssh.launcher import handed_values

    value = "it's $HOME `id` \"quoted\"\\n"
    monkeypatch.setenv("HF_TOKEN", value)
    plan = type("Plan", (), {"secret_env": [("HF_TOKEN", "from_env MY_HF")]})()
    lines = handed_values(plan)  # type: ignore[arg-type]
    out = subprocess.run(["bash", "-c", 'eval "$(cat)"; printf %s "$HF_TOKEN"'], input=lines,
                         capture_output=True, check=True, env={"PATH": os.environ["PATH"]}).stdout
    assert out.decode() == value


def test_the_notifier_fills_in_kept_header_values_and_leaves_out_a_hook_whose_value_is_gone(
) -> None:
    from fsdp_orch.notify.process import with_header_values

    hooks = [Webhook(url="http://h/a",
                     headers={"Authorization": SecretRef(from_file="/t"), "X": "1"}),
             Webhook(url="http://h/b", headers={"Authorization": SecretRef(from_env="GONE")})]
    ready, missing = with_header_values(hooks, {"0": {"Authorization": "Bearer kept"}})
    assert [h.headers for h in ready] == [{"Authorization": "Bearer kept", "X": "1"}]
    assert missing == [(1, "Authorization")]


def test_kept_values_are_private_and_forgotten(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from fsdp_orch.places import secrets

    monkeypatch.setenv("FSDP_ORCH_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir(mode=0o700)
    secrets.keep("j1", "env", {"HF_TOKEN": "hf-1"})
    secrets.keep("j1", "notify", {})  # nothing to keep: no file
    path = Path(secrets.secrets_path("j1", "env"))
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert secrets.read("j1", "env") == {"HF_TOKEN": "hf-1"} and secrets.held("j1") == ["env"]
    path.chmod(0o666)  # a file others could have written is not trusted
    assert secrets.read("j1", "env") == {}
    secrets.forget("j1")
    assert not path.exists() and secrets.held("j1") == []


def test_doctor_says_what_is_kept_and_fails_when_others_could_read_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fsdp_orch.cli.doctor import secret_checks
    from fsdp_orch.places import secrets

    monkeypatch.setenv("FSDP_ORCH_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir(mode=0o700)
    assert secret_checks()[0].ok
    secrets.keep("j1", "notify", {"0": {"Authorization": "Bearer b"}})
    [check] = secret_checks()
    assert check.ok and "1 job(s)" in check.detail and "Bearer" not in check.detail
    os.chmod(secrets.secrets_path("j1", "notify"), 0o644)
    [check] = secret_checks()
    assert not check.ok and "j1.notify.json" in check.detail
