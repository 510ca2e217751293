"""The quoting filters templates use: each one checked against the reader on the other side."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdp_orch.launch.render import one_line, path_quote, sbatch_path, sbatch_value, shell_quote
from fsdp_orch.vocab.errors import InputError


def sbatch_reads(line: str) -> list[str]:
    """How sbatch splits an ``#SBATCH`` line into arguments: a transcription of
    ``_get_argument`` in slurm's src/sbatch/opt.c (whitespace splits, ``"`` groups,
    backslash escapes the next character, an unescaped ``#`` ends the line)."""
    args, i = [], 0
    while True:
        while i < len(line) and line[i].isspace():
            i += 1
        if i >= len(line):
            return args
        arg, quoted, escape = [], False, False
        while i < len(line) and (quoted or not line[i].isspace()) and line[i] != "\n":
            c = line[i]
            i += 1
            if escape:
                escape = False
                arg.append(c)
            elif c == "\\":
                escape = True
            elif c == '"':
                quoted = not quoted
            elif c == "#":
                return args + (["".join(arg)] if arg else [])
            else:
                arg.append(c)
        if arg:
            args.append("".join(arg))


values = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x00"),
                 min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(values)
def test_sbatch_value_reads_back(value: str) -> None:
    # sbatch's isspace is C's (ASCII); other spaces stay inside one argument either way.
    assert sbatch_reads(f"--partition={sbatch_value(value)}") == [f"--partition={value}"]


@pytest.mark.parametrize(("value", "written"), [
    ("gpu", "gpu"), ("a b", '"a b"'), ("x#y", "x\\#y"), ('q"r', 'q\\"r'), ("b\\s", "b\\\\s"),
])
def test_sbatch_value_examples(value: str, written: str) -> None:
    assert sbatch_value(value) == written


def test_sbatch_value_refuses_line_breaks() -> None:
    with pytest.raises(InputError, match="line break"):
        sbatch_value("a\nb")


def test_sbatch_path_keeps_percent_literal() -> None:
    assert sbatch_path("/home/me/50% done") == '"/home/me/50%% done"'
    assert sbatch_reads(f"--output={sbatch_path('/a b/runs')}/slurm-%j.out") == [
        "--output=/a b/runs/slurm-%j.out"]


def bash_echo(expr: str) -> str:
    proc = subprocess.run(["bash", "-c", f"printf '%s' {expr}"], capture_output=True,
                          env={"HOME": "/home/tester", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()  # bytes: text mode would turn a \r into \n


@settings(max_examples=60, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=20))
def test_shell_quote_reads_back_in_bash(value: str) -> None:
    assert bash_echo(shell_quote(value)) == value


@pytest.mark.parametrize(("path", "seen"), [
    ("~", "/home/tester"), ("~/w x", "/home/tester/w x"), ("/a/~/b", "/a/~/b"),
    ("~user/x", "~user/x"), ("a~b", "a~b"), ("~/$(x)", "/home/tester/$(x)"), ("/plain", "/plain"),
])
def test_path_quote(path: str, seen: str) -> None:
    assert bash_echo(path_quote(path)) == seen


@pytest.mark.parametrize(("value", "shown"), [
    ("plain name", "plain name"), ("a\nb", "a\\nb"), ("a\rb", "a\\rb"), ("tab\there", "tab\there"),
    ('q"\nx', 'q\\"\\nx'),
])
def test_one_line(value: str, shown: str) -> None:
    assert one_line(value) == shown
    assert "\n" not in one_line(value)
