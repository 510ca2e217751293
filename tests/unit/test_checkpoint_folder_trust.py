"""A checkpoint folder follows the rule of places.trust in three places, which must agree: submit's
check on its own machine (``local_folder_problem``), the supervisor's through a ``Storage`` (over
SFTP on a host's own disk: ``folder_problem`` with that host's lstat), and each node's launch
script (bash, templates/_node_body.sh.j2) before anything starts. Real folders under this test's
tmp_path, with modes and owners set as another account would have left them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from fsdp_orch.places.trust import folder_problem, local_folder_problem

GOLDEN_SCRIPT = Path(__file__).parents[1] / "golden" / "local-torchrun" / "launch.sh"
STRANGER = 54321  # a uid no account has: chown needs root


def node_check() -> str:
    """The bash function the launch scripts define, as rendered (the golden file is the template's
    output: test_render_golden holds them equal)."""
    match = re.search(r"^fsdp_orch_refusal\(\) \{\n.*?^\}\n", GOLDEN_SCRIPT.read_text(),
                      re.S | re.M)
    assert match, "the launch script no longer defines fsdp_orch_refusal"
    return match.group(0)


def node_verdict(folder: Path) -> str | None:
    script = node_check() + 'if why=$(fsdp_orch_refusal "$1"); then echo "$why"; exit 3; fi\n'
    proc = subprocess.run(["bash", "-c", script, "check", str(folder)], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode in (0, 3), proc.stderr
    return proc.stdout.strip() if proc.returncode == 3 else None


def ours(tmp_path: Path) -> Path:
    base = tmp_path / "base"
    base.mkdir(mode=0o700)
    base.chmod(0o700)
    return base


def setups(base: Path) -> dict[str, tuple[Path, str | None]]:
    """name: (checkpoint folder, the path the refusal must name, or None when it is allowed)."""
    mine = base / "mine"
    mine.mkdir(mode=0o700)
    open_to_all = base / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    sticky = base / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    group = base / "group"
    group.mkdir()
    group.chmod(0o770)
    (group / "ckpt").mkdir(mode=0o700)
    link = base / "link"
    link.symlink_to(open_to_all)
    cases: dict[str, tuple[Path, str | None]] = {
        "mine": (mine, None),
        "not made yet, in a folder of mine": (mine / "a" / "b", None),
        "not made yet, in a sticky folder": (sticky / "new", None),
        "the sticky folder itself": (sticky, str(sticky)),
        "others can write it": (open_to_all, str(open_to_all)),
        "not made yet, in one others can write": (open_to_all / "new", str(open_to_all)),
        "below a folder the group can write": (group / "ckpt", str(group)),
        "a link of mine to a folder others can write": (link, str(open_to_all)),
    }
    if os.geteuid() == 0:
        theirs = base / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, STRANGER, STRANGER)
        cases["another account's"] = (theirs, str(theirs))
        planted = sticky / "planted"
        planted.mkdir(mode=0o755)
        os.chown(planted, STRANGER, STRANGER)
        cases["another account's, in a sticky folder"] = (planted, str(planted))
    return cases


def test_submit_the_supervisor_and_each_node_agree_on_every_folder(tmp_path: Path) -> None:
    def lstat(path: str) -> tuple[int, int] | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        return st.st_uid, st.st_mode

    for name, (folder, named) in setups(ours(tmp_path)).items():
        here = local_folder_problem(folder)
        # the supervisor's view through a storage: no names, the links followed as SFTP would
        through_storage = folder_problem(str(folder), lstat, os.getuid(),
                                         real_path=os.path.realpath)
        on_the_node = node_verdict(folder)
        for who, why in (("submit", here), ("supervisor", through_storage),
                         ("node", on_the_node)):
            if named is None:
                assert why is None, f"{name}: {who} refused {folder}: {why}"
            else:
                assert why is not None and why.startswith(named + " "), (
                    f"{name}: {who} should name {named}, said {why!r}")
        if named is not None and "another account" in name:
            assert f"uid {STRANGER}" in here and f"uid {STRANGER}" in on_the_node  # type: ignore


def test_the_node_says_why_with_owner_and_mode(tmp_path: Path) -> None:
    base = ours(tmp_path)
    folder = base / "open"
    folder.mkdir()
    folder.chmod(0o777)
    assert node_verdict(folder) == (
        f"{folder} can be written by others (owner uid {os.getuid()} "
        f"({subprocess.run(['id', '-un'], capture_output=True, text=True).stdout.strip()}), "
        "mode 0777)")


@pytest.mark.parametrize("resume", ["auto", "never"])
def test_a_launch_script_refuses_before_anything_starts(tmp_path: Path, resume: str) -> None:
    """The whole node body as rendered: with a checkpoint folder others can write, the launch
    script says so on stderr and exits 78 (node_setup_error) before the launcher; a job that never
    resumes is not held to it."""
    base = ours(tmp_path)
    open_to_all = base / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    script = GOLDEN_SCRIPT.read_text()
    start = script.index("fsdp_orch_refusal() {")
    end = script.index("  exit 78\nfi\n", start) + len("  exit 78\nfi\n")
    body = script[start:end] + "echo launcher-would-start\n"
    env = {**os.environ, "FSDP_ORCH_CHECKPOINT_DIR": str(open_to_all / "ckpt"),
           "FSDP_ORCH_RESUME": resume}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", body], capture_output=True, text=True,
                          env=env, cwd=base, timeout=30)
    if resume == "never":
        assert proc.returncode == 0 and "launcher-would-start" in proc.stdout, proc.stderr
        return
    assert proc.returncode == 78 and "launcher-would-start" not in proc.stdout, proc
    assert proc.stderr.startswith(f"[fsdp-orch] node setup: refused checkpoint folder "
                                  f"{open_to_all}/ckpt on "), proc.stderr
    assert f"{open_to_all} can be written by others" in proc.stderr
