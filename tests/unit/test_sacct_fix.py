"""``doctor``'s fix for a failed ``sacct`` follows what it said (issue 62): a host with no
slurm.conf is told about SLURM_CONF, not asked to have slurmdbd enabled."""

from __future__ import annotations

from fsdp_orch.vocab.checks import SACCT_NO_ACCOUNTING, sacct_fix


def test_no_configuration_source_is_told_about_slurm_conf() -> None:
    fix = sacct_fix("sacct: fatal: Could not establish a configuration source")
    assert "SLURM_CONF" in fix and "slurm.conf" in fix and "slurmdbd" not in fix


def test_no_accounting_keeps_its_fix() -> None:
    said = ("sacct: error: Problem talking to the database: Connection refused\n"
            "Slurm accounting storage is disabled")
    assert sacct_fix(said) == SACCT_NO_ACCOUNTING
