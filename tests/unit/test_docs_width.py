"""No line of a code block in docs/ is wider than the site shows without scrolling: a YAML comment
or a command cut off at the right edge reads as something else, and the reader never knows.

Why 80: the MkDocs Material theme (mkdocs.yml) draws code in a column that holds 80 characters of
its monospace font at window widths 1280, 1600 and 1920 (measured in headless Chromium: 688 px of
8.18 px characters at 1280, the font growing with the window beyond), and 87 at 1024, where the
navigation folds away. tests/integration/test_docs_site.py checks the same pages in the browser:
no code block there scrolls."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CODE_WIDTH = 80
# Pages written before this check, each with the over-wide lines it had then: the count may only
# shrink (a page that reaches 0 leaves this list). Every other page holds to CODE_WIDTH.
NOT_YET = {"contributing-layout.md": 61, "guides/frameworks.md": 32, "guides/fit.md": 29,
           "concepts/node-agents.md": 10, "overview.md": 9, "guides/metrics.md": 4,
           "concepts/security.md": 2, "contributing.md": 1}


def wide_lines(text: str) -> list[str]:
    """The lines of ``text``'s fenced code blocks wider than CODE_WIDTH."""
    found, inside = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside and len(line) > CODE_WIDTH:
            found.append(line)
    return found


def test_no_code_block_is_wider_than_the_site_shows() -> None:
    pages = {str(p.relative_to(REPO / "docs")): p for p in sorted((REPO / "docs").rglob("*.md"))}
    assert {"reference/job.md", "reference/cli.md", "clusters/slurm.md"} <= set(pages)
    for name, page in pages.items():
        wide = wide_lines(page.read_text())
        allowed = NOT_YET.get(name, 0)
        assert len(wide) <= allowed, (f"docs/{name}: {len(wide)} code line(s) wider than "
                                      f"{CODE_WIDTH} (at most {allowed}): {wide[:3]}")
    for name in NOT_YET:
        assert name in pages, f"docs/{name} is gone: drop it from NOT_YET"


def test_the_check_sees_a_wide_line() -> None:
    text = "x\n```yaml\nname: demo   # " + "y" * 80 + "\n```\n" + "z" * 200 + "\n"
    assert len(wide_lines(text)) == 1
