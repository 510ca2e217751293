"""``notify:`` in a job or a cluster profile: bad input is one line naming the file, the field and
what was expected, exit 2, through the real CLI entry point (``render``, in process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdp_orch.cli import main as cli
from fsdp_orch.jobspec.loading import load_job_text

JOB = "name: demo\nscript: train.py\n"


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("FSDP_ORCH_HOME", str(tmp_path / "home"))
    return work


def render(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(["render", *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("entry, expected", [
    ("{url: 'ftp://h/x'}",
     ("job.yaml:4", "notify.0.url", "expected an http:// or https:// URL", "'ftp://h/x'")),
    ("{url: 'http://h/x', when: [SUCEEDED]}",
     ("job.yaml:4", "notify.0.when", "did you mean 'SUCCEEDED'?")),
    ("{url: 'http://h/x', on: [failure_detcted]}",
     ("job.yaml:4", "did you mean 'failure_detected'?")),
    ("{url: 'http://h/x', retry_for: soon}", ("job.yaml:4", "notify.0.retry_for", "duration")),
    ("{url: 'http://h/x', format: xml}", ("job.yaml:4", "notify.0.format", "'json' or 'slack'")),
    ("{url: 'http://h/x', when: []}", ("notify.0.when", "at least one state or event")),
    ("{url: 'http://h/x', on: [RUNNING], when: [FAILED]}", ("notify.0", "not both")),
    ("{url: 'http://h/x', onn: [RUNNING]}", ("notify.0.onn", "unknown field")),
])
def test_a_bad_webhook_in_a_job_is_one_line_and_exit_2(sandbox, capsys, entry, expected):
    (sandbox / "job.yaml").write_text(JOB + "notify:\n  - " + entry + "\n")
    code, err = render(capsys, "job.yaml", "--cluster", "local")
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in expected:
        assert fragment in err, (fragment, err)


def test_a_bad_webhook_in_a_cluster_profile_names_the_profile(sandbox, capsys):
    (sandbox / "job.yaml").write_text(JOB)
    (sandbox / "lab.yaml").write_text("kind: local\nnotify:\n  - url: http://h/x\n"
                                      "    when: [FINISHED]\n")
    code, err = render(capsys, "job.yaml", "--cluster", "lab.yaml")
    assert code == 2 and err.count("\n") == 1, err
    assert "lab.yaml:4" in err and "notify.0.when" in err and "'FINISHED'" in err


def test_a_good_webhook_renders_and_a_bad_one_from_set_names_set(sandbox, capsys):
    (sandbox / "job.yaml").write_text(JOB + "notify: [{url: 'https://h/x', on: [RUNNING], "
                                            "retry_for: 1m}]\n")
    code, err = render(capsys, "job.yaml", "--cluster", "local")
    assert code == 0, err
    code, err = render(capsys, "job.yaml", "--cluster", "local", "--set", "notify=[{url: 'h/x'}]")
    assert code == 2 and "--set" in err and "notify.0.url" in err, err


def test_on_and_when_are_the_same_field_and_the_default_is_the_ends():
    # YAML 1.1 reads a bare `on:` as the boolean true; it still means `when`
    job = load_job_text(JOB
                        + "notify:\n  - url: https://h/x\n    on: [RUNNING, checkpoint_committed]\n"
                        "  - url: https://h/y\n")
    assert job.notify[0].when == ["RUNNING", "checkpoint_committed"]
    assert (job.notify[1].when == ["SUCCEEDED", "INCOMPLETE", "FAILED", "CANCELLED"]
            and job.notify[1].retry_for == 600)


CONTROLS = [chr(c) for c in range(0x20)] + ["\x7f"]


@pytest.mark.parametrize("char", CONTROLS, ids=[f"0x{ord(c):02x}" for c in CONTROLS])
def test_a_header_with_a_control_character_is_refused_at_load_naming_the_header(char):
    """CR/LF would split the request (and the notifier failed only after retry_for): any C0 control
    or DEL in a header's value or name is refused when the spec is loaded, naming the header and
    never quoting the value (it is often a token)."""
    from fsdp_orch.vocab.errors import InputError

    value = json.dumps("Bearer t0k" + char + "en")
    with pytest.raises(InputError) as raised:
        load_job_text(JOB
                      + f"notify:\n  - url: https://h/x\n    headers: {{Authorization: {value}}}\n")
    assert (raised.value.field == "notify.0.headers"
            and "header 'Authorization'" in str(raised.value))
    assert "t0k" not in str(raised.value) and "\n" not in str(raised.value)
    name = json.dumps("X-" + char + "Team")
    with pytest.raises(InputError) as raised:
        load_job_text(JOB + f"notify:\n  - url: https://h/x\n    headers: {{{name}: ml}}\n")
    assert raised.value.field == "notify.0.headers" and "header name" in str(raised.value)


def test_ordinary_headers_are_kept():
    job = load_job_text(JOB + "notify:\n  - url: https://h/x\n"
                        "    headers: {Authorization: 'Bearer a.b-c_d~', X-Note: 'café ☃, "
                        "spaces ok'}\n")
    assert job.notify[0].headers == {
        "Authorization": "Bearer a.b-c_d~", "X-Note": "café ☃, spaces ok"}
