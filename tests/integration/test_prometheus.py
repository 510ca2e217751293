"""A real Prometheus (Debian's ``prometheus``, on loopback) scrapes every way out of fsdp-orch's
metrics every second while a local job lives through a crash, a SIGKILL and a hang: the HTTP
exporter (``metrics --serve``), node_exporter (Debian's ``prometheus-node-exporter``) reading the
directory that ``metrics --textfile --every 1`` writes, and a second node_exporter reading the one
the job's supervisor writes as the job goes (``FSDP_ORCH_METRICS_TEXTFILE_DIR``). Queried with
PromQL through Prometheus's HTTP API, each way out gives status --json's goodput (within 0.5
points), restarts by reason as the job's events have them, and the last complete checkpoint's
step."""

from __future__ import annotations

import collections
import json
import select
import stat
import subprocess
import sys

import pytest
from cli_harness import demo_args, job_events, why
from prometheus_harness import Prometheus, free_port, installed, until

from fsdp_orch.places.builtin import METRICS_TEXTFILE_ENV

pytestmark = pytest.mark.slow

FAULTS = "crash:step=6:rank=1:attempt=0;kill:step=12:rank=0:attempt=1;hang:step=18:rank=1:attempt=2"
SETTINGS = [
    # 0.1 s a step: the productive time is a fair share of the wall time, not a few 30 ms steps
    "--set", demo_args(60, "--sleep-per-step", "0.1"),
    "--set", "checkpoint.interval=5",
    "--set", "restart.backoff.initial=1s",
    "--set", "restart.backoff.jitter=0",
    "--set", "watch.heartbeat_timeout=6s",
    "--set", "watch.startup_timeout=90s",
    "--set", f"env.FSDP_ORCH_FAULT={FAULTS}",
]
WAYS_OUT = ("exporter", "textfile", "supervisor")  # Prometheus's scrape jobs


def in_both(found: dict[str, list]) -> dict[str, list] | None:  # type: ignore[type-arg]
    return found if all(found.get(way) for way in WAYS_OUT) else None


@pytest.fixture
def scraped(cli, tmp_path):  # type: ignore[no-untyped-def]
    """Prometheus scraping the exporter and two node_exporters (the textfile's directory and the
    supervisor's), each every second, for ``cli``'s home; stopped at the end. Gives Prometheus and
    the supervisor's directory."""
    prometheus, node_exporter = installed("prometheus"), installed("prometheus-node-exporter")
    textfiles, supervisor_files = tmp_path / "textfile", tmp_path / "supervisor"
    textfiles.mkdir()
    supervisor_files.mkdir()
    fsdp_orch = [sys.executable, "-m", "fsdp_orch", "metrics"]
    procs = []
    try:
        exporter = subprocess.Popen([*fsdp_orch, "--serve", "127.0.0.1:0"], env=cli.env,
                                    stdout=subprocess.PIPE, text=True)
        procs.append(exporter)
        assert select.select([exporter.stdout], [], [], 30)[0], "the exporter said nothing"
        line = exporter.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("serving http://127.0.0.1:"), line
        exporter_port = int(line.rsplit(":", 1)[1].split("/")[0])
        procs.append(subprocess.Popen([*fsdp_orch, "--textfile", str(textfiles), "--every", "1"],
                                      env=cli.env))
        ports = {"textfile": free_port(), "supervisor": free_port()}
        for way, folder in (("textfile", textfiles), ("supervisor", supervisor_files)):
            procs.append(subprocess.Popen(
                [node_exporter, "--collector.disable-defaults", "--collector.textfile",
                 f"--collector.textfile.directory={folder}",
                 f"--web.listen-address=127.0.0.1:{ports[way]}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        ports["exporter"], prom_port = exporter_port, free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {"job_name": way, "static_configs": [{"targets": [f"127.0.0.1:{ports[way]}"]}]}
                for way in WAYS_OUT]}))
        procs.append(subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        prom = Prometheus(prom_port)
        until("both targets up", lambda: set(prom.query("up == 1")) == set(WAYS_OUT))
        yield prom, supervisor_files
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_prometheus_sees_goodput_restarts_and_checkpoint_as_status_does(cli, demo, scraped):
    prom, supervisor_files = scraped
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(demo), *SETTINGS,
                   timeout=300, env={**cli.env, METRICS_TEXTFILE_ENV: str(supervisor_files)})
    job_id = json.loads(proc.stdout)["id"] if proc.stdout.strip() else None
    assert job_id, proc.stderr
    status = cli.status(job_id)
    assert status["state"] == "SUCCEEDED" and status["attempts"] == 4, why(status)
    job = f'job_id="{job_id}"'
    ended = until("the job's end in both ways out", lambda: in_both(
        prom.query(f'fsdp_orch_job_state{{{job},state="SUCCEEDED"}}')))
    assert {w: len(ended[w]) for w in WAYS_OUT} == dict.fromkeys(WAYS_OUT, 1)
    [written] = supervisor_files.iterdir()
    assert written.name == f"fsdp_orch_job_{job_id}.prom"
    assert stat.S_IMODE(written.stat().st_mode) == 0o644, "node_exporter runs as another user"

    running = prom.query(f'max_over_time(fsdp_orch_job_state{{{job},state="RUNNING"}}[10m])')
    assert {w: [v for _, v in running[w]] for w in WAYS_OUT} == {w: [1.0] for w in WAYS_OUT}, (
        "scraped while the job ran")

    goodput = prom.query(f"fsdp_orch_job_goodput_ratio{{{job}}}")
    for way in WAYS_OUT:
        [(_, ratio)] = goodput[way]
        assert abs(100 * ratio - status["goodput"]["goodput_pct"]) <= 0.5, (way, ratio, status)

    events = job_events(cli, job_id)
    restarted = collections.Counter(e["category"] for e in events
                                    if e["kind"] == "failure_detected" and e["action"] == "restart")
    assert sum(restarted.values()) == sum(e["kind"] == "restart_scheduled" for e in events) == 3
    restarts = prom.query(f"fsdp_orch_job_restarts_total{{{job}}}")
    for way in WAYS_OUT:
        assert {labels["reason"]: v for labels, v in restarts[way]} == restarted, way

    checkpoint = prom.query(f"fsdp_orch_last_complete_checkpoint_step{{{job}}}")
    assert status["last_checkpoint_step"] is not None
    for way in WAYS_OUT:
        assert [v for _, v in checkpoint[way]] == [status["last_checkpoint_step"]], way

    recovered = prom.query("sum(fsdp_orch_recovery_seconds_count) by (job)")
    assert {w: [v for _, v in recovered[w]] for w in WAYS_OUT} == {w: [3.0] for w in WAYS_OUT}
    # the supervisor's pace: its looks at an attempt come every poll_interval (1 s), or a few
    # seconds apart while it takes a hung rank's stacks
    pace = prom.query(f"max_over_time(fsdp_orch_supervisor_poll_interval_seconds{{{job}}}[10m])")
    [(_, longest)] = pace["supervisor"]
    assert 0.5 < longest < 30, longest
