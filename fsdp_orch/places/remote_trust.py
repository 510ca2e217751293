"""The StrictModes rule of ``places.trust`` as a POSIX shell snippet, for a folder on a host that
fsdp-orch reaches over SSH: the run folder it writes the node scripts into on hosts with their own
disks (``<remote_workdir>/runs/<id>``). In a shared scratch (1777), another account could make
``remote_workdir`` first and swap the scripts in it before they run. Pure: text only."""

from __future__ import annotations

import shlex

REFUSED_EXIT = 78  # EX_CONFIG, as the node scripts' own setup refusals

# $1: the folder. Walks from it (or, not made yet, the nearest folder above that is there) up to
# /, the real path too: each must be the caller's or root's, and writable by no one else (a
# sticky folder above the first, like /tmp, excepted). Prints why and returns 0 when refused.
_REFUSAL = r"""
fsdp_orch_refusal() {
  given=$(realpath -ms -- "$1"); first=1
  while [ ! -e "$given" ] && [ ! -L "$given" ] && [ "$given" != / ]; do
    given=$(dirname -- "$given"); first=
  done
  for path in "$given" "$(realpath -m -- "$given")"; do
    here_first=$first
    while :; do
      set -- $(stat -c '%u %f %U' -- "$path" 2>/dev/null)
      [ $# -eq 3 ] || { echo "$path cannot be read"; return 0; }
      mode=$((0x$2))
      if [ "$1" != "$(id -u)" ] && [ "$1" != 0 ]; then
        printf '%s is owned by uid %s (%s) (mode %04o), not by you (uid %s) or root' \
          "$path" "$1" "$3" $((mode & 07777)) "$(id -u)"
        return 0
      fi
      if [ $((mode & 0170000)) != $((0120000)) ] && [ $((mode & 022)) != 0 ] \
          && { [ -n "$here_first" ] || [ ! -d "$path" ] || [ $((mode & 01000)) = 0 ]; }; then
        printf '%s can be written by others (owner uid %s (%s), mode %04o)' \
          "$path" "$1" "$3" $((mode & 07777))
        return 0
      fi
      [ "$path" = / ] && break
      path=$(dirname -- "$path"); here_first=
    done
  done
  return 1
}
"""


def check_command(folder: str, what: str) -> str:
    """A command that exits ``REFUSED_EXIT`` with one line on stderr when ``folder`` (or, not
    made yet, the folder it would be made in) fails the rule; 0 otherwise. Makes nothing."""
    return (f"{_REFUSAL}\nif why=$(fsdp_orch_refusal {shlex.quote(folder)}); then "
            f"printf 'refused {what} %s on %s: %s\\n' {shlex.quote(folder)} \"$(hostname)\" "
            f"\"$why\" >&2; exit {REFUSED_EXIT}; fi")


def make_and_check_command(folder: str, what: str) -> str:
    """``folder`` made (0700, what is missing of it) and then held to the rule as it is now: a
    folder another account made first fails. Exits ``REFUSED_EXIT`` with one line when refused."""
    return f"umask 077 && mkdir -p -- {shlex.quote(folder)} && {{ {check_command(folder, what)}\n}}"


__all__ = ["REFUSED_EXIT", "check_command", "make_and_check_command"]
