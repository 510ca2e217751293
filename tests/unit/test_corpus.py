"""The classifier over the corpus of real failure lines (``tests/fixtures/corpus/``), from public
issue trackers and from broken torch_xla configurations run here (``tests/fixtures/xla_broken/``):
every case, the spread per category, and the targets the README reports (``bench/diagnose.py``
prints the full table)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from fsdp_orch.supervise.diagnose import diagnose_text, quoted
from fsdp_orch.vocab.categories import FAILURE_CATEGORIES, NOT_IN_PUBLIC_LOGS

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "corpus"
SOURCE = re.compile(r"^[\w.-]+/[\w.-]+#\d+ \(https://github\.com/[\w.-]+/[\w.-]+/(?:issues|pull|"
                    r"discussions)/\d+\)$")
# Or lines produced here by running a broken configuration kept beside the corpus.
PRODUCED = re.compile(r"^produced here: (?P<script>tests/fixtures/(?:xla|gpu)_broken/\w+\.py) "
                      r"under \S.*\)")
MIN_PER_CATEGORY = 12


def _bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_diagnose", REPO / "bench" / "diagnose.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()
CASES = BENCH.load_corpus(CORPUS)
# Real lines the rules do not get right, each for a reason a general rule should not paper over.
# strict: a case that starts passing must leave this list.
NO_SIGN_OF_A_HANG = ("the excerpt shows no sign of the hang (progress or info line"
                     "s only); the supervisor finds it from heartbeats, not from text")
KNOWN_MISSES: dict[str, str] = {
    "hang:eric-mitchell/direct-preference-optimization#85:c785b4": NO_SIGN_OF_A_HANG,
    "hang:NVIDIA/nccl#1160:eb00bf": NO_SIGN_OF_A_HANG,
    "hang:Lightning-AI/pytorch-lightning#19606:ab0259": NO_SIGN_OF_A_HANG,
    "hang:deepspeedai/DeepSpeed#4367:fee051": NO_SIGN_OF_A_HANG,
    "hang:lucidrains/audiolm-pytorch#210:0a78a9": NO_SIGN_OF_A_HANG,
    "hang:PrimeIntellect-ai/prime-rl#1057:750788": NO_SIGN_OF_A_HANG,
    "hang:huggingface/transformers#17478:e636e4": NO_SIGN_OF_A_HANG,
    "hang:open-mmlab/mmdetection#6534:5ea072": NO_SIGN_OF_A_HANG,
    "checkpoint_error:deepspeedai/DeepSpeed#1322:4efde9": "a bare AssertionError printed before "
        "the checkpoint-loading frames that explain it; read in order, the first line is the "
        "user's assertion",
    "user_code_error:ddPn08/rvc-webui#33:107c61": "the AttributeError comes from `net_g.module` on "
        "the line that calls load_state_dict; the checkpoint rule reads that source line, not "
        "which call failed (the evidence, the child's own exception, is right)",
}


def case_id(case: dict) -> str:
    digest = hashlib.sha1(case["text"].encode()).hexdigest()[:6]
    return f"{case['category']}:{case['source'].split(' ')[0]}:{digest}"


def _params() -> list:  # type: ignore[type-arg]
    return [pytest.param(case, id=case_id(case),
                         marks=[pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[case_id(case)])]
                         if case_id(case) in KNOWN_MISSES else []) for case in CASES]


def test_the_corpus_has_200_cases_and_12_per_category_from_several_projects() -> None:
    assert len(CASES) >= 200
    counts = Counter(case["category"] for case in CASES)
    # decided from what no log shows
    assert set(counts) == set(FAILURE_CATEGORIES) - NOT_IN_PUBLIC_LOGS
    assert min(counts.values()) >= MIN_PER_CATEGORY, counts
    projects: dict[str, set[str]] = defaultdict(set)
    for case in CASES:
        projects[case["category"]].add(BENCH.project_of(case["source"]))
    assert all(len(names) >= 4 for names in projects.values()), projects


def test_every_case_names_its_source_and_no_text_is_there_twice() -> None:
    for case in CASES:
        produced = PRODUCED.match(case["source"])
        assert (SOURCE.match(case["source"])
                or (produced and (REPO / produced["script"]).is_file())), case["source"]
        assert case["text"].strip()
    texts = [case["text"] for case in CASES]
    assert len(set(texts)) == len(texts)


@pytest.mark.parametrize("case", _params())
def test_each_case(case: dict) -> None:
    diagnosis = diagnose_text(case["text"])
    assert diagnosis.category == case["category"], (diagnosis, case["source"])
    if diagnosis.category != "unknown":
        # the line that decided it
        assert diagnosis.evidence and quoted(diagnosis.evidence) in case["text"]
        where = re.search(r" \(at (?:\.\.\./)?([^ :]+):(\d+)", diagnosis.evidence)
        if where:  # the frame it names is in the excerpt
            file, line = where.groups()
            assert re.search(rf'{re.escape(file)}", line {line}\b',
                             case["text"].replace("\\", "/")), where
    assert diagnosis.hint


def test_the_targets_the_readme_reports() -> None:
    result = BENCH.evaluate(CASES)
    assert result["accuracy"] >= 0.95, json.dumps(result["misses"], indent=1)
    assert result["leave_one_project_out"] >= 0.90


def test_a_users_own_traceback_is_never_called_retryable() -> None:
    for case in CASES:
        if case["category"] == "user_code_error":
            assert not diagnose_text(case["text"]).retryable, case["source"]


WRAPPED = re.compile(r"ProcessRaisedException|^Exception:\s*$|terminated with the following error",
                     re.M)


def test_a_wrapped_exceptions_evidence_is_the_inner_exception_never_the_wrapper() -> None:
    """mp.spawn's ProcessRaisedException (older torch: a bare "Exception:") carries the child's own
    exception: that one, the last exception line after the wrapper, is the evidence."""
    wrapped = [case for case in CASES if WRAPPED.search(case["text"])]
    assert len({case["source"] for case in wrapped}) >= 5
    for case in wrapped:
        evidence = quoted(diagnose_text(case["text"]).evidence or "")
        assert evidence and not WRAPPED.search(evidence), (case["source"], evidence)
        after = case["text"].split("terminated with the following error", 1)[-1]
        assert evidence in after, (case["source"], evidence)


def test_signal_endings_name_their_signal() -> None:
    for case in CASES:
        if case["category"] in ("killed_sigkill", "crashed_signal"):
            evidence = diagnose_text(case["text"]).evidence or ""
            assert re.search(r"SIG[A-Z]+|Killed|Bus error|Segmentation fault|out of memory",
                             evidence), case
