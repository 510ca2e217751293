"""``fsdp-orch fit`` against another account (issue 61), with a real second account (``useradd``,
then ``setpriv``; the tests run as root, the victim). ``fit`` imports the job's model factory and
reads a Hugging Face config, so what another account can add or change there is refused with one
line naming it, exit 2, and nothing of it runs: a package planted beside the user's ``train.py``
in a 1777 job folder, a snapshot planted in a shared ``HF_HOME``; and a config's custom code
(``auto_map``) is never run or asked about, whoever owns it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cli_harness import REPO, Cli
from other_accounts import as_other

TINY = REPO / "tests" / "fixtures" / "fit" / "tiny-llama"
FACTORY = ("import torch\n\n"
           "def model_for_fit():\n"
           "    return torch.nn.Sequential(torch.nn.Embedding(64, 64), torch.nn.Linear(64, 64))\n")
# What the other account's code does when it runs as the victim: note who ran it.
PAYLOAD = "import os\nos.system('id > {marker}')\n"




def fit(cli: Cli, job: Path, **env: str):  # type: ignore[no-untyped-def]
    return cli.run("fit", str(job), "--cluster", "local", "--gpu-memory", "1GB", "--json",
                   env={**cli.env, **env}, timeout=300)


def test_a_package_planted_beside_the_factory_in_a_shared_job_folder_is_refused_unrun(
        cli: Cli, other_account: tuple[int, int], scratch: Path) -> None:
    (scratch / "train.py").write_text(FACTORY)
    job = scratch / "job.yaml"
    job.write_text("name: f\nscript: train.py\nprocs_per_node: 2\n"
                   "fit: {model: 'train:model_for_fit', batch_size: 2, seq_len: 8}\n")
    marker = scratch / "ran-as-the-victim"
    as_other(other_account, f"mkdir -m 755 {scratch}/train; printf \"{PAYLOAD}"
                            "def model_for_fit():\\n    raise SystemExit(0)\\n\" "
             .format(marker=marker) + f"> {scratch}/train/__init__.py")

    refused = fit(cli, job)
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    [line] = refused.stderr.strip().splitlines()
    assert "refused the model factory's module train" in line, line
    assert f"{scratch} can be written by others" in line and "mode 1777" in line, line
    assert "Traceback" not in refused.stderr and not refused.stdout
    assert not marker.exists(), f"the planted package ran as the victim: {marker.read_text()}"

    # the same factory in a folder of the user's own is imported and measured
    mine = cli.home.parent / "mine"
    mine.mkdir()
    shutil.copy(scratch / "train.py", mine)
    shutil.copy(job, mine)
    measured = fit(cli, mine / "job.yaml")
    assert measured.returncode == 0, measured.stderr
    assert json.loads(measured.stdout)["parameters"] == 64 * 64 + 64 * 64 + 64


def test_a_snapshot_planted_in_a_shared_hf_home_is_refused_and_custom_code_is_never_asked(
        cli: Cli, tmp_path: Path, other_account: tuple[int, int], scratch: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: f\nscript: train.py\nprocs_per_node: 2\n"
                   "fit: {model: org/tiny, batch_size: 2, seq_len: 8}\n")
    snapshot = scratch / "hf" / "hub" / "models--org--tiny" / "snapshots" / "abc"
    as_other(other_account, f"umask 022; mkdir -p {snapshot} {snapshot.parents[1]}/refs; "
                            f"cp {TINY}/config.json {snapshot}/; "
                            f"echo abc > {snapshot.parents[1]}/refs/main")

    refused = fit(cli, job, HF_HOME=str(scratch / "hf"))
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    [line] = refused.stderr.strip().splitlines()
    assert f"refused the model's config {snapshot}/config.json" in line, line
    assert f"uid {other_account[0]}" in line, line
    assert "Traceback" not in refused.stderr

    # the user's own config naming custom code (auto_map): a type transformers knows is built
    # from transformers' own class, one it does not know is refused; neither is run nor asked about
    custom = tmp_path / "custom"
    custom.mkdir()
    marker = tmp_path / "ran"
    (custom / "planted.py").write_text(PAYLOAD.format(marker=marker))
    config = json.loads((TINY / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "planted.Config", "AutoModelForCausalLM": "planted.Model"}
    (custom / "config.json").write_text(json.dumps(config))
    job.write_text("name: f\nscript: train.py\nprocs_per_node: 2\n"
                   "fit: {model: custom, batch_size: 2, seq_len: 8}\n")
    known = fit(cli, job)
    assert known.returncode == 0, known.stderr
    assert json.loads(known.stdout)["parameters"] > 0
    (custom / "config.json").write_text(json.dumps({**config, "model_type": "planted"}))
    unknown = fit(cli, job)
    assert unknown.returncode == 2, (unknown.stdout, unknown.stderr)
    [line] = unknown.stderr.strip().splitlines()
    assert "asks for custom code (auto_map)" in line and "fit.model" in line, line
    assert "[y/N]" not in unknown.stdout + unknown.stderr
    assert not marker.exists(), f"the config's code ran as the user: {marker.read_text()}"
