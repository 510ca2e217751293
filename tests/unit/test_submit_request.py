"""The submit request: the rules for combining submit's options are the request's, so the command
line and the Python API refuse the same combinations (each in its own words: one line, exit 2,
nothing written); and a submit plans the job once, passing that plan on to the record."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import fsdp_orch
from fsdp_orch.cli import main as cli
from fsdp_orch.control.submit_request import API_WORDS, CLI_WORDS, SubmitRequest
from fsdp_orch.vocab.errors import InputError

JOB = "name: demo\nscript: train.py\n"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.yaml").write_text(JOB)
    monkeypatch.chdir(work)
    monkeypatch.setenv("FSDP_ORCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


# (rule, the CLI's flags, the API's arguments, the CLI's message, the API's message)
RULES = [
    ("timeout-without-wait", ["--timeout", "10"], {"timeout": 10},
     "--timeout: only with --wait (how long to wait for the job to end)",
     "timeout: only with wait=True (how long to wait for the job to end)"),
    ("blank-key", ["--idempotency-key", "  "], {"idempotency_key": "  "},
     "--idempotency-key: expected a non-empty key; got '  '",
     "idempotency_key: expected a non-empty key, or None"),
    ("empty-key", ["--idempotency-key", ""], {"idempotency_key": ""},
     "--idempotency-key: expected a non-empty key; got ''",
     "idempotency_key: expected a non-empty key, or None"),
    ("empty-init-from", ["--init-from", ""], {"init_from": ""},
     "--init-from: expected a job id or a checkpoint path; got '' (leave it out for a cold start)",
     "init_from: expected a job id or a checkpoint path; got '' (leave it out for a cold start)"),
    ("init-optimizer-alone", ["--init-optimizer"], {"init_optimizer": True},
     "--init-optimizer: only with --init-from (the checkpoint whose optimizer state to take)",
     "init_optimizer: only with init_from (the checkpoint whose optimizer state to take)"),
    ("resume-and-fresh", ["--resume", "--fresh"], {"resume": True, "fresh": True},
     "--resume/--fresh: expected one of --resume (continue the checkpoint there) or --fresh "
     "(move it aside and start over), not both",
     "resume/fresh: expected one of resume=True or fresh=True, not both"),
    ("bad-gpu-memory", ["--gpu-memory", "lots"], {"gpu_memory": "lots"},
     "--gpu-memory: expected a memory size like 80GB, 24GiB or 512MB (from 1 byte to 1PiB); "
     "got 'lots'",
     "gpu_memory: expected a memory size like 80GB, 24GiB or 512MB (from 1 byte to 1PiB); "
     "got 'lots'"),
    ("gpu-memory-unchecked", ["--gpu-memory", "80GB", "--no-fit-check"],
     {"gpu_memory": "80GB", "fit_check": False},
     "--gpu-memory: only without --no-fit-check (it is the memory the fit check holds the job "
     "against)",
     "gpu_memory: only without fit_check=False (it is the memory the fit check holds the job "
     "against)"),
]
IDS = [rule[0] for rule in RULES]


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(("rule", "flags", "kwargs", "cli_says", "api_says"), RULES, ids=IDS)
def test_the_cli_and_the_api_refuse_the_same_options(home, capsys, rule, flags, kwargs,
                                                     cli_says, api_says):
    before = listing(home.parent)
    assert cli.main(["submit", "job.yaml", "--cluster", "local", *flags]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"fsdp-orch: error: {cli_says}\n")
    with pytest.raises(InputError) as raised:
        fsdp_orch.submit("job.yaml", "local", **kwargs)
    assert str(raised.value) == api_says and raised.value.exit_code == 2
    assert listing(home.parent) == before, "a refused submit wrote something"


@pytest.mark.parametrize(("rule", "flags", "kwargs", "cli_says", "api_says"), RULES, ids=IDS)
def test_the_rules_are_the_requests(rule, flags, kwargs, cli_says, api_says):
    """Each surface's error is the one the request raises in that surface's words."""
    for words, says in ((CLI_WORDS, cli_says), (API_WORDS, api_says)):
        with pytest.raises(InputError) as raised:
            SubmitRequest(Path("job.yaml"), "local", words=words, **kwargs)
        assert str(raised.value) == says


def test_a_request_holds_what_was_asked():
    request = SubmitRequest(Path("job.yaml"), "slurm", ("nodes=2",), wait=True, timeout="1h30m",
                            fresh=True)
    assert request.wait_s == 5400.0 and request.checkpoint_choice == "fresh"
    assert not request.checkpoint_per_job
    assert SubmitRequest(Path("j"), "c", wait=True, timeout=2.5, words=API_WORDS).wait_s == 2.5
    scheduled = SubmitRequest(Path("j"), "c", idempotency_key="k", origin={"schedule": "s"})
    assert scheduled.checkpoint_per_job and scheduled.checkpoint_choice is None
    with pytest.raises(InputError, match="expected a duration"):
        SubmitRequest(Path("j"), "c", wait=True, timeout="soon")
    assert SubmitRequest(Path("j"), "c", gpu_memory="1400MB").gpu_memory_bytes == 1400 << 20
    assert SubmitRequest(Path("j"), "c", gpu_memory=1 << 30, words=API_WORDS).gpu_memory_bytes \
        == 1 << 30


@pytest.mark.parametrize("words", [CLI_WORDS, API_WORDS])
def test_a_gpu_memory_for_a_job_without_a_fit_block_is_said_to_do_nothing(home, words):
    from fsdp_orch.control.fit_gate import fit_gated
    from fsdp_orch.control.planning import plan_submission

    (home.parent / "work" / "train.py").write_text("print('trained')\n")
    request = SubmitRequest(Path("job.yaml"), "local", gpu_memory="80GB", words=words)
    gated = fit_gated(request, plan_submission(request), home=home)
    assert gated.notes == [f"{words.gpu_memory} has no effect: the job has no fit: block "
                           "(nothing to estimate)"]
    assert gated.planned.fit_estimate is None
    unasked = SubmitRequest(Path("job.yaml"), "local", words=words)
    assert fit_gated(unasked, plan_submission(unasked), home=home).notes == []


def test_a_submit_plans_once_and_says_the_plans_notices(home, capsys, monkeypatch):
    """The plan that checked the job before the index was opened is the one recorded; its notices
    are said from it, not from a plan made again."""
    import fsdp_orch.launch.submission as submission
    from fsdp_orch.backends.registry import cluster_kind
    from fsdp_orch.control import job_control, planning

    (home.parent / "work" / "job.yaml").write_text(JOB + "launcher: accelerate\n")
    (home.parent / "work" / "train.py").write_text("print('trained')\n")  # submit checks it
    calls: Counter[str] = Counter()
    make_plan = submission.make_plan

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["make_plan"] += 1
        return make_plan(*args, **kwargs)

    monkeypatch.setattr(submission, "make_plan", counted)
    monkeypatch.setattr(planning, "local_has_gpu", lambda: False)  # accelerate's FSDP runs as DDP
    monkeypatch.setattr(type(cluster_kind("local")), "start",
                        lambda self, index, sub, first: calls.update(["start"]))
    monkeypatch.setattr(job_control, "start_notifier", lambda sub: None)
    assert cli.main(["submit", "job.yaml", "--cluster", "local"]) == 0
    out, err = capsys.readouterr()
    assert calls == Counter(make_plan=1, start=1)
    assert len(out.split()) == 1 and err.count("MULTI_CPU") == 1, err


def test_the_job_id_is_drawn_before_the_plan_and_the_kind_starts_the_plan_recorded(
        home, monkeypatch):
    """SLURM's batch script is the one rendered from the plan recorded at submit, under the job's
    own id: nothing is planned again to start it. The recorded spec names the job; its hash is the
    same for the same spec whichever job it is."""
    import json

    import fsdp_orch.launch.submission as submission
    from fsdp_orch.backends.slurm import kind as slurm_kind
    from fsdp_orch.control.job_control import submit
    from fsdp_orch.record.index import open_index_for_submit

    (home.parent / "work" / "train.py").write_text("print('trained')\n")
    calls: Counter[str] = Counter()
    make_plan = submission.make_plan

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["make_plan"] += 1
        return make_plan(*args, **kwargs)

    sbatched: list[str] = []

    def sbatch(argv, runner=None):  # type: ignore[no-untyped-def]
        sbatched.append(Path(argv[-1]).read_text())
        return "4242"

    monkeypatch.setattr(submission, "make_plan", counted)
    monkeypatch.setattr(slurm_kind, "run_command", sbatch)
    request = SubmitRequest(Path("job.yaml"), "slurm")
    with open_index_for_submit() as index:
        first, _ = submit(index, request)
        second, _ = submit(index, request)
        rows = {job_id: index.store.job(job_id) for job_id in (first, second)}
    assert calls["make_plan"] == 2  # one plan a job
    assert len(sbatched) == 2 and f"fsdp-orch-{first}" in sbatched[0]
    for job_id, row in rows.items():
        assert row is not None and row.backend_ref == "slurm:4242"
        assert json.loads(row.spec_json)["_resolved"]["job_id"] == job_id
    assert rows[first].spec_hash == rows[second].spec_hash  # type: ignore[union-attr]
