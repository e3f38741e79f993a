"""Every relative link in the repository's markdown files resolves: the file or folder exists, and a ``#anchor`` names
a heading of the target file (GitHub's heading ids). Absolute URLs are not fetched.

Links are inline (``[text](path#anchor)``, images too) and reference definitions (``[label]: path``); those inside
code spans and fenced code blocks are not links and are skipped.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_INLINE_LINK = re.compile(r"\]\(([^)\s]+)\)")
_REFERENCE_DEFINITION = re.compile(r"^\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_ABSOLUTE = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def markdown_files() -> list[str]:
    """The repository's markdown files (tracked, or new and not ignored), relative to its root."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.md"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(name for name in listed.stdout.splitlines() if (REPO_ROOT / name).is_file())


def heading_ids(text: str) -> set[str]:
    """GitHub's ids of the headings of a markdown text: lower case, punctuation dropped, spaces to hyphens, and
    ``-1``, ``-2``, ... appended to repeats."""
    seen: dict[str, int] = {}
    ids = set()
    for line in _FENCE.sub("", text).splitlines():
        match = _HEADING.match(line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(2).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            ids.add(slug if count == 0 else f"{slug}-{count}")
            seen[slug] = count + 1
    return ids


def broken_links(path: Path) -> list[str]:
    """Every relative link of the markdown file `path` that does not resolve, with the reason."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", path.read_text()))
    targets = _INLINE_LINK.findall(text) + _REFERENCE_DEFINITION.findall(text)
    problems = []
    for target in targets:
        if _ABSOLUTE.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path.resolve()
        if not resolved.exists():
            problems.append(f"{target}: no such file or folder")
        elif anchor and (resolved.is_dir() or resolved.suffix != ".md"):
            problems.append(f"{target}: an anchor on something that is not a markdown file")
        elif anchor and anchor not in heading_ids(resolved.read_text()):
            problems.append(f"{target}: the target has no heading with that id")
    return problems


@pytest.mark.parametrize("name", markdown_files())
def test_every_relative_link_resolves(name):
    assert broken_links(REPO_ROOT / name) == []


def test_heading_ids_follow_github():
    text = "# Status and limits\n## `trainer.device`: auto?\n```\n# not a heading\n```\n## Status and limits\n"
    assert heading_ids(text) == {"status-and-limits", "trainerdevice-auto", "status-and-limits-1"}


def test_a_missing_file_and_a_missing_anchor_are_reported(tmp_path):
    (tmp_path / "other.md").write_text("# Present\n")
    page = tmp_path / "page.md"
    page.write_text("[a](other.md#present) [b](missing.md) [c](other.md#absent) `[d](skipped.md)` [e](https://x.y/z)\n")
    assert broken_links(page) == [
        "missing.md: no such file or folder",
        "other.md#absent: the target has no heading with that id",
    ]
