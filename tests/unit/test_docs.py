"""The guide (README.md and the MkDocs site in docs/) says what is true: the site builds with
``mkdocs build --strict``, every YAML block in it loads through fsdp-orch's own loader (a job, a
fragment of one, or a cluster profile), and every example job validates against the JSON Schema
``fsdp-orch schema job`` gives editors, which refuses a misspelt field as the loader does."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fsdp_orch.jobspec.loading import load_job_text
from fsdp_orch.vocab.errors import InputError

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)
README_LIMIT = 200


def yaml_blocks() -> list[tuple[str, str]]:
    return [(f"{page.relative_to(REPO)}#{n}", block) for page in PAGES
            for n, block in enumerate(BLOCK.findall(page.read_text()), 1)]


def test_the_readme_is_a_front_door() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_LIMIT, len(lines)


def test_the_site_builds_strict(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    proc = subprocess.run([str(mkdocs), "build", "--strict", "--quiet", "-d", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "index.html").is_file() and (tmp_path / "reference" / "job" / "index.html")


@pytest.mark.parametrize(("where", "block"), yaml_blocks(), ids=[w for w, _ in yaml_blocks()])
def test_every_yaml_block_in_the_docs_loads(tmp_path: Path, where: str, block: str) -> None:
    data = yaml.safe_load(block)
    assert isinstance(data, dict), f"{where}: not a mapping"
    if "kind" in data:  # a cluster profile
        from fsdp_orch.backends.registry import parse_profile

        path = tmp_path / "profile.yaml"
        path.write_text(block)
        parse_profile(path)
        return
    if not {"script", "module", "command"} & set(data):  # a fragment of a job: in a whole one
        data = {"name": "docs", "script": "train.py", **data}
        block = yaml.safe_dump(data)
    try:
        load_job_text(block, file=where)
    except InputError as exc:
        pytest.fail(f"{where} does not load: {exc}")


def test_every_example_job_validates_against_the_editors_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from fsdp_orch.cli.commands.schema import json_schema

    schema = json_schema("job")
    jobs = sorted((REPO / "examples").rglob("job.yaml"))
    assert len(jobs) >= 10
    for job in jobs:
        jsonschema.validate(yaml.safe_load(job.read_text()), schema)
    misspelt = {**yaml.safe_load(jobs[0].read_text()), "procs_per_nod": 2}
    with pytest.raises(jsonschema.ValidationError, match="procs_per_nod"):
        jsonschema.validate(misspelt, schema)
    profile = json_schema("profile")
    json.dumps(profile)  # one document: every kind's definitions at its root
    for name in ("local", "slurm", "ssh"):
        jsonschema.validate(yaml.safe_load((REPO / "clusters" / f"{name}.yaml").read_text()),
                            profile)


@pytest.mark.parametrize("what", ["job", "profile"])
def test_the_schema_names_its_dialect_and_uses_only_its_keywords(what: str) -> None:
    """pydantic wrote ``gt: 0`` for a duration (a number or a string), which no validator knows:
    a negative backoff passed. The schema is checked against its own dialect's meta-schema."""
    jsonschema = pytest.importorskip("jsonschema")
    from fsdp_orch.cli.commands.schema import json_schema

    schema = json_schema(what)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    text = json.dumps(schema)
    assert not re.search(r'"(gt|ge|lt|le)": -?[0-9]', text), "a keyword no validator knows"
    if what == "job":
        negative = {"name": "j", "script": "t.py", "restart": {"backoff": {"initial": -5}}}
        with pytest.raises(jsonschema.ValidationError, match="-5"):
            jsonschema.validate(negative, schema)


def test_the_framework_guides_show_the_example_jobs_as_they_are() -> None:
    """Each job shown in docs/guides/frameworks.md under its file's name is that file, byte for
    byte (the examples are what the tests run)."""
    text = (REPO / "docs" / "guides" / "frameworks.md").read_text()
    shown = re.findall(r"^`(examples/[^`]+/job\.yaml)`:\n\n```yaml\n(.*?)^```", text, re.S | re.M)
    assert len(shown) >= 9, shown
    for path, block in shown:
        assert block == (REPO / path).read_text(), f"{path} is not shown as it is"


def test_every_command_has_a_description_examples_and_the_environment() -> None:
    """``fsdp-orch COMMAND --help``: what it is for, examples whose options exist, JOB_ID's help,
    and FSDP_ORCH_HOME and FSDP_ORCH_FAULT; ``-V`` prints the version."""
    import contextlib
    import io

    from fsdp_orch.cli.commands import NAMES
    from fsdp_orch.cli.help_text import EXAMPLES
    from fsdp_orch.cli.main import build_parser, main

    for name in NAMES:
        text = io.StringIO()
        with contextlib.redirect_stdout(text), pytest.raises(SystemExit):
            main([name, "--help"])
        page = text.getvalue()
        assert "FSDP_ORCH_HOME" in page and "FSDP_ORCH_FAULT" in page, name
        if "JOB_ID" in page.split("options:")[0]:
            assert "the start of one that names a single job" in page, name
        for example in EXAMPLES.get(name, "").replace("\\\n", " ").splitlines():
            argv = shlex.split(example, comments=True)
            if argv[:1] != ["fsdp-orch"]:
                continue
            argv = argv[1:argv.index(">")] if ">" in argv else argv[1:]
            build_parser(only=argv[0]).parse_args(argv)  # exits 2 on an option that is not there
    for name in ("render", "submit", "status", "cancel"):
        assert name in EXAMPLES
    text = io.StringIO()
    with contextlib.redirect_stdout(text), pytest.raises(SystemExit):
        main(["-V"])
    assert text.getvalue().startswith("fsdp-orch ")


def test_the_field_reference_is_what_the_models_say() -> None:
    """docs/reference/fields.md is generated from the loader's models (scripts/gen_reference.py):
    a field added, removed or given another default without regenerating it fails here."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_reference.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = (REPO / "docs" / "reference" / "fields.md").read_text()
    for field in ("`watch.heartbeat_timeout`", "`checkpoint.resume_args`", "`restart.max_restarts`",
                  "kind: slurm", "`shared_dir`"):
        assert field in text, field
