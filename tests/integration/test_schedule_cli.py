"""``fsdp-orch schedule ...`` as a user types it: what it shows, and bad input refused whole."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture
def quick(tmp_path):
    job = tmp_path / "quick.yaml"
    job.write_text("name: quick\nlauncher: python\ncommand: ['true']\n")
    return str(job)


def test_add_list_pause_resume_remove(cli, quick):
    added = cli.run("schedule", "add", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Paris",
                    "--cluster", "local", quick, "--concurrency", "replace", "--set", "env.SEED=7",
                    "--json", check=True)
    row = json.loads(added.stdout)
    assert (row["next_tick"].endswith("T03:00:00+01:00")
            or row["next_tick"].endswith("T03:00:00+02:00"))
    [listed] = json.loads(cli.run("schedule", "list", "--json", check=True).stdout)
    assert {k: listed[k]
            for k in ("name", "cron", "tz", "cluster", "concurrency", "state", "overrides")} == {
        "name": "nightly", "cron": "0 3 * * *", "tz": "Europe/Paris", "cluster": "local",
        "concurrency": "replace", "state": "active", "overrides": ["env.SEED=7"]}
    table = cli.run("schedule", "list", check=True).stdout
    assert "nightly" in table and "Europe/Paris" in table
    cli.run("schedule", "pause", "nightly", check=True)
    [paused] = json.loads(cli.run("schedule", "list", "--json", check=True).stdout)
    assert paused["state"] == "paused" and paused["next_tick"] is None
    cli.run("schedule", "resume", "nightly", check=True)
    events = cli.run("schedule", "events", "nightly", check=True).stdout
    assert [line.split()[1] for line in events.splitlines()] == [
        "schedule_added", "paused", "resumed"]
    cli.run("schedule", "remove", "nightly", check=True)
    assert json.loads(cli.run("schedule", "list", "--json", check=True).stdout) == []


@pytest.mark.parametrize(("args", "words"), [
    (["--cron", "0 25 * * *"], ["--cron", "five-field"]),
    (["--cron", "0 3 * * *", "--tz", "Paris"], ["--tz", "IANA"]),
    (["--cron", "0 3 * * *", "--concurrency", "queue"],
     ["--concurrency", "forbid, replace, allow"]),
    (["--cron", "0 3 * * *", "--set", "nodes=zero"], ["nodes"]),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(cli, quick, args, words):
    proc = cli.run("schedule", "add", "nightly", "--cluster", "local", quick, *args)
    assert proc.returncode == 2, proc.stderr
    assert ("Traceback" not in proc.stderr
            and len(proc.stderr.strip().splitlines()) == 1), (proc.stderr)
    assert all(w in proc.stderr for w in words), proc.stderr
    assert json.loads(cli.run("schedule", "list", "--json", check=True).stdout) == []


def test_unknown_schedule_and_bad_name(cli, quick):
    proc = cli.run("schedule", "pause", "nope")
    assert proc.returncode == 2 and "no schedule named 'nope'" in proc.stderr
    proc = cli.run("schedule", "add", "../up", "--cron", "0 3 * * *", "--cluster", "local", quick)
    assert proc.returncode == 2 and "NAME" in proc.stderr


def test_a_broken_schedule_never_stops_the_others(cli, quick):
    """A schedule an older version let in (a cron that never fires) or a hand-broken file crashed
    `schedule list` and `scheduler run` for every schedule. Now it is skipped with one warning line
    naming its file, and `schedule remove` still removes it."""
    cli.run("schedule", "add", "ok1", "--cron", "0 3 * * *", "--cluster", "local", quick,
            check=True)
    written = json.loads((cli.home / "schedules" / "ok1" / "schedule.json").read_text())
    for name, change in (("never", {"cron": "0 3 31 2 *"}), ("garbled", None)):
        folder = cli.home / "schedules" / name
        (folder / "events").mkdir(parents=True)
        text = json.dumps({**written, "name": name, **change}) if change else "{\"name\": "
        (folder / "schedule.json").write_text(text)
    for argv in (
        ("schedule", "list", "--json"), ("schedule", "list"), ("scheduler", "run", "--once")):
        proc = cli.run(*argv)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        warnings = proc.stderr.strip().splitlines()
        assert (len(warnings) == 2
                and all(w.startswith("fsdp-orch: warning: skipping schedule ") for w in warnings))
        assert (str(cli.home / "schedules" / "never" / "schedule.json") in warnings[1]
                and "never fires" in warnings[1])
        assert str(cli.home / "schedules" / "garbled" / "schedule.json") in warnings[0]
    assert ([r["name"] for r in json.loads(cli.run("schedule", "list", "--json",
                                                   check=True).stdout)] == ["ok1"])
    for name in ("never", "garbled"):
        cli.run("schedule", "remove", name, check=True)
    proc = cli.run("schedule", "list", "--json", check=True)
    assert proc.stderr == "" and [r["name"] for r in json.loads(proc.stdout)] == ["ok1"]
