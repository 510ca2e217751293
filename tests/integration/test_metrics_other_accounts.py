"""The metrics against another account on the same machine (issue 61), with a real second account
(``useradd``, then ``setpriv``): loopback answers every account, so ``metrics --serve`` says so and,
with ``--token-file``, answers only a scrape carrying the token, which a real Prometheus sends from
its ``credentials_file``; a ``.prom`` file the other account planted first in a shared textfile
folder is named with its owner, exit 2, and no temporary copy of the user's metrics is left."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import secret_checks
from cli_harness import Cli
from other_accounts import as_other
from prometheus_harness import Prometheus, free_port, installed, until

VICTIM = "fsdporchvictim"  # the user, when it must not be root
TOKEN = "3f0c9a1e5b7d2468ace0f1b3c5d7e9aa"
# What the other account runs: a GET of the exporter with the Authorization it is given, printing
# the HTTP status.
GET = ("import sys, urllib.error, urllib.request\n"
       "req = urllib.request.Request(sys.argv[1], headers=dict([sys.argv[2].split(': ', 1)]) "
       "if len(sys.argv) > 2 else {})\n"
       "try:\n    print(urllib.request.urlopen(req, timeout=10).status)\n"
       "except urllib.error.HTTPError as e:\n    print(e.code)\n")


def exporter(cli: Cli, *flags: str) -> tuple[subprocess.Popen, int]:  # type: ignore[type-arg]
    proc = subprocess.Popen([sys.executable, "-m", "fsdp_orch", "metrics", "--serve",
                             "127.0.0.1:0", *flags], env=cli.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert select.select([proc.stdout], [], [], 30)[0], "the exporter said nothing"
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line.startswith("serving http://127.0.0.1:"), line
    return proc, int(line.rsplit(":", 1)[1].split("/")[0])


def as_other_get(account: tuple[int, int], url: str, *header: str) -> int:
    uid, gid = account
    got = subprocess.run(secret_checks.as_account(uid, gid, [sys.executable, "-c", GET, url,
                                                             *header]),
                         capture_output=True, text=True, timeout=60, check=True)
    return int(got.stdout)


def test_the_exporter_says_who_can_read_it_and_with_a_token_answers_only_prometheus(
        cli: Cli, tmp_path: Path, other_account: tuple[int, int]) -> None:
    open_one, port = exporter(cli)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        assert as_other_get(other_account, url) == 200  # what the notice warns of
    finally:
        open_one.terminate()
        _, err = open_one.communicate(timeout=10)
    assert "every account that can reach 127.0.0.1" in err and "--token-file" in err, err

    token_file = tmp_path / "metrics.token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o644)
    readable = cli.run("metrics", "--serve", "127.0.0.1:0", "--token-file", str(token_file))
    assert readable.returncode == 2 and "can be read by others (mode 0644)" in readable.stderr
    assert len(readable.stderr.strip().splitlines()) == 1 and not readable.stdout
    token_file.chmod(0o600)

    guarded, port = exporter(cli, "--token-file", str(token_file))
    procs = [guarded]
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        assert as_other_get(other_account, url) == 401
        guess = "Authorization: Bearer guessed-token-0123456"
        assert as_other_get(other_account, url, guess) == 401
        assert as_other_get(other_account, url, f"Authorization: Basic {TOKEN}") == 401
        prom_port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": "exporter",
                                "authorization": {"credentials_file": str(token_file)},
                                "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]}))
        procs.append(subprocess.Popen(
            [installed("prometheus"), f"--config.file={config}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        prom = Prometheus(prom_port)
        # up is 1 only for a scrape answered 200: the token from credentials_file was taken
        until("Prometheus scraping with the token", lambda: prom.query("up == 1").get("exporter"))
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=10)


def test_a_prom_file_planted_first_in_a_shared_textfile_folder_is_named_and_nothing_is_left(
        tmp_path: Path, other_account: tuple[int, int], scratch: Path) -> None:
    """The user is an unprivileged account here: root may replace anyone's file in a sticky
    folder, a user may not."""
    uid, gid = secret_checks.other_account(VICTIM)
    home = tmp_path / "victim-home"
    home.mkdir(mode=0o700)
    os.chown(tmp_path, uid, gid)
    os.chown(home, uid, gid)
    planted = scratch / "fsdp_orch.prom"
    as_other(other_account, f"umask 022; echo 'fsdp_orch_job_state 1' > {planted}")

    written = subprocess.run(
        secret_checks.as_account(uid, gid, [sys.executable, "-m", "fsdp_orch", "metrics",
                                            "--textfile", str(scratch)]),
        env={"PATH": os.environ["PATH"], "HOME": str(home), "FSDP_ORCH_HOME": str(home)},
        capture_output=True, text=True, timeout=60)
    assert written.returncode == 2, (written.stdout, written.stderr)
    [line] = written.stderr.strip().splitlines()
    assert f"{planted} was made by uid {other_account[0]}" in line, line
    assert "node_exporter serves it as yours" in line and "--textfile" in line, line
    assert sorted(p.name for p in scratch.iterdir()) == ["fsdp_orch.prom"], (
        "a temporary copy of the user's metrics was left behind")
