"""A scheduler or a retried pipeline task submits the same tick more than once, at the same time:
one idempotency key makes exactly one job, whatever the race."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = pytest.mark.slow


def test_ten_concurrent_submits_with_one_key_make_exactly_one_job(cli, tmp_path):
    job = tmp_path / "quick.yaml"
    job.write_text("name: quick\nlauncher: python\ncommand: ['true']\n")
    with ThreadPoolExecutor(10) as pool:
        procs = list(pool.map(lambda _: cli.run("submit", "--cluster", "local", "--json",
                                                "--idempotency-key",
                                                "retrain@2026-11-23T03:00Z", str(job)), range(10)))
    assert all(p.returncode == 0 for p in procs), [p.stderr for p in procs if p.returncode]
    answers = [json.loads(p.stdout) for p in procs]
    assert len({a["id"] for a in answers}) == 1, answers
    assert sum(a["created"] for a in answers) == 1, answers
    jobs = json.loads(cli.run("status", "--json", check=True).stdout)
    assert [j["id"] for j in jobs] == [answers[0]["id"]], jobs
    assert [p.name for p in (cli.home / "runs").iterdir()] == [
        answers[0]["id"]], "a losing submit left its folder"
    cli.wait_until(answers[0]["id"], lambda s: s["state"] == "SUCCEEDED", timeout=120,
                   what="the one job")
