"""How well does the failure classifier generalize? Precision and recall per category over the
corpus of real failure lines (``tests/fixtures/corpus/``: from public threads, and from broken
torch_xla configurations run here), accuracy per source project, the
leave-one-project-out score, and the time ``fsdp-orch diagnose`` takes over 1,000 files.

    .venv/bin/python bench/diagnose.py [--files 1000] [--json]

Leave-one-project-out: the rules are general (a failure's meaning, not one project's phrasing), so
no rule is fitted to a project; the score is the mean over source projects of the accuracy on that
project's cases, each project weighted the same however many cases it has. Targets: accuracy 95%
on the corpus, leave-one-project-out 90%, 1,000 files in under 2 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fsdp_orch.supervise.diagnose import diagnose_text  # noqa: E402
from fsdp_orch.vocab.categories import FAILURE_CATEGORIES  # noqa: E402

CORPUS = REPO / "tests" / "fixtures" / "corpus"
PRODUCED_HERE = "produced here"  # the source of lines from running a broken configuration here


def load_corpus(directory: Path = CORPUS) -> list[dict]:
    cases = []
    for path in sorted(directory.glob("*.json")):
        for case in json.loads(path.read_text(encoding="utf-8")):
            cases.append({**case, "file": path.name})
    return cases


def project_of(source: str) -> str:
    """``owner/repo#123 (https://...)`` -> ``owner/repo``; lines produced here count as one
    project."""
    if source.startswith(PRODUCED_HERE):
        return PRODUCED_HERE
    return source.split("#", 1)[0].strip()


def evaluate(cases: list[dict]) -> dict:
    predicted = [diagnose_text(case["text"]).category for case in cases]
    per_category = {}
    for category in FAILURE_CATEGORIES:
        tp = sum(1 for c, p in zip(cases, predicted, strict=True)
                 if p == category and c["category"] == category)
        fp = sum(1 for c, p in zip(cases, predicted, strict=True)
                 if p == category and c["category"] != category)
        fn = sum(1 for c, p in zip(cases, predicted, strict=True)
                 if p != category and c["category"] == category)
        per_category[category] = {
            "cases": tp + fn, "precision": tp / (tp + fp) if tp + fp else None,
            "recall": tp / (tp + fn) if tp + fn else None}
    by_project: dict[str, list[bool]] = defaultdict(list)
    for case, guess in zip(cases, predicted, strict=True):
        by_project[project_of(case["source"])].append(guess == case["category"])
    projects = {name: sum(hits) / len(hits) for name, hits in sorted(by_project.items())}
    misses = [{"expected": c["category"], "got": p, "source": c["source"], "text": c["text"][:160]}
              for c, p in zip(cases, predicted, strict=True) if p != c["category"]]
    return {
        "cases": len(cases),
        "accuracy": (sum(1 for c, p in zip(cases, predicted, strict=True) if p == c["category"])
                     / len(cases)),
        "leave_one_project_out": statistics.fmean(projects.values()),
        "projects": {name: {"accuracy": acc, "cases": len(by_project[name])}
                     for name, acc in projects.items()},
        "per_category": per_category,
        "misses": misses,
    }


def time_cli(cases: list[dict], files: int) -> dict:
    """``fsdp-orch diagnose --json`` over ``files`` log files (the corpus texts, cycled)."""
    cli = Path(sys.executable).parent / "fsdp-orch"
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i in range(files):
            path = Path(tmp) / f"rank-{i}.log"
            path.write_text(cases[i % len(cases)]["text"] + "\n", encoding="utf-8")
            paths.append(str(path))
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([str(cli), "diagnose", "--json", *paths], check=True,
                           stdout=subprocess.DEVNULL)
            runs.append(time.perf_counter() - t0)
        baseline = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            baseline.append(time.perf_counter() - t0)
    return {"files": files, "seconds": statistics.median(runs),
            "python_start_s": statistics.median(baseline)}


def table(result: dict) -> str:
    def pct(x: float | None) -> str:
        return "  -  " if x is None else f"{100 * x:5.1f}"

    lines = ["| category | cases | precision % | recall % |", "|---|---|---|---|"]
    for category, row in result["per_category"].items():
        lines.append(f"| {category} | {row['cases']} | {pct(row['precision'])} | "
                     f"{pct(row['recall'])} |")
    lines.append(f"\ncases {result['cases']}, accuracy {100 * result['accuracy']:.1f}%, "
                 f"leave-one-project-out {100 * result['leave_one_project_out']:.1f}% over "
                 f"{len(result['projects'])} projects")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cases = load_corpus()
    result = evaluate(cases)
    result["timing"] = time_cli(cases, args.files)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(table(result))
    print("\nper source project (accuracy, cases):")
    for name, row in result["projects"].items():
        print(f"  {name}: {100 * row['accuracy']:.0f}% of {row['cases']}")
    print(f"\nmisses ({len(result['misses'])}):")
    for miss in result["misses"]:
        print(f"  {miss['expected']} -> {miss['got']}  [{miss['source'].split(' ')[0]}]  "
              f"{miss['text']!r}")
    timing = result["timing"]
    print(f"\nfsdp-orch diagnose over {timing['files']} files: {timing['seconds']:.2f} s "
          f"(python -c pass: {timing['python_start_s']:.3f} s); target < 2 s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
