"""The rule for what decides what runs as the user (places.trust): sshd's StrictModes, with a
sticky folder of root's or the user's (/tmp) allowed above."""

from __future__ import annotations

import stat

import pytest

from fsdp_orch.places.trust import chain_problem

ME, OTHER = 1000, 1001
FILE, DIR, LINK = stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK


def chain(*links: tuple[str, int, int]) -> list[tuple[str, int, int]]:
    return list(links)


@pytest.mark.parametrize(("seen", "problem"), [
    (chain(("/p/clusters/a.yaml", ME, FILE | 0o644), ("/p/clusters", ME, DIR | 0o755),
           ("/p", ME, DIR | 0o700), ("/", 0, DIR | 0o755)), None),
    (chain(("/p/a.yaml", 0, FILE | 0o644), ("/p", 0, DIR | 0o755), ("/", 0, DIR | 0o755)), None),
    # /tmp: others can write it, but the sticky bit keeps them from replacing what is mine
    (chain(("/tmp/p/a.yaml", ME, FILE | 0o600), ("/tmp/p", ME, DIR | 0o755),
           ("/tmp", 0, DIR | 0o1777), ("/", 0, DIR | 0o755)), None),
    (chain(("/tmp/p/a.yaml", OTHER, FILE | 0o644), ("/tmp/p", ME, DIR | 0o755),
           ("/tmp", 0, DIR | 0o1777)), "/tmp/p/a.yaml is owned by uid 1001 (mode 0644)"),
    (chain(("/tmp/clusters/a.yaml", ME, FILE | 0o644), ("/tmp/clusters", OTHER, DIR | 0o755),
           ("/tmp", 0, DIR | 0o1777)), "/tmp/clusters is owned by uid 1001 (mode 0755)"),
    (chain(("/p/a.yaml", ME, FILE | 0o664), ("/p", ME, DIR | 0o755)),
     "/p/a.yaml can be written by others (owner uid 1000, mode 0664)"),
    (chain(("/p/a.yaml", ME, FILE | 0o644), ("/p", ME, DIR | 0o777)),
     "/p can be written by others (owner uid 1000, mode 0777)"),
    # a sticky folder of another account's: its owner may rename what is in it
    (chain(("/s/p/a.yaml", ME, FILE | 0o644), ("/s/p", ME, DIR | 0o755),
           ("/s", OTHER, DIR | 0o1777)), "/s is owned by uid 1001 (mode 1777)"),
    # a sticky file is no folder: its bit protects nothing
    (chain(("/p/a.yaml", ME, FILE | 0o1666), ("/p", ME, DIR | 0o755)),
     "/p/a.yaml can be written by others (owner uid 1000, mode 1666)"),
    # a link of mine: its mode means nothing (the target's chain is checked on its own)
    (chain(("/p/a.yaml", ME, LINK | 0o777), ("/p", ME, DIR | 0o755)), None),
    (chain(("/p/a.yaml", OTHER, LINK | 0o777), ("/p", ME, DIR | 0o755)),
     "/p/a.yaml is owned by uid 1001 (mode 0777)"),
])
def test_what_may_decide_what_runs_as_me(seen, problem) -> None:  # type: ignore[no-untyped-def]
    got = chain_problem(seen, ME)
    if problem is None:
        assert got is None
    else:
        assert got is not None and got.startswith(problem), got
