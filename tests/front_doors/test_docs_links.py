"""Every relative link in README.md and docs/**/*.md points at a file that exists and, when it
names an anchor, at a heading of that file with that GitHub-style slug."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the target ends at whitespace or the closing bracket.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`+[^`]*`+")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, with their 1-based numbers."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces
    to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if char in " -_" or category[0] in "LN" or category == "Mn":
            kept.append("-" if char == " " else char)
    return "".join(kept)


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub makes for the headings of a file (repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    result = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def relative_links(path: Path) -> list[tuple[int, str]]:
    links = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # http:, https:, mailto: ...
            links.append((number, target))
    return links


def broken_links(path: Path) -> list[str]:
    problems = []
    for number, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        destination = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        if not destination.exists():
            problems.append(f"{where}: no file {file_part}")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            problems.append(f"{where}: no heading #{anchor} in {file_part or path.name}")
    return problems


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(path: Path) -> None:
    assert broken_links(path) == []


def test_slugs_follow_github() -> None:
    assert slug("What the proxy refuses, its time-outs and the stored scripts") == (
        "what-the-proxy-refuses-its-time-outs-and-the-stored-scripts"
    )
    assert slug("Why a hit scored what it did (`--explain`)") == (
        "why-a-hit-scored-what-it-did---explain"
    )
    assert slug("Install footprint and cold start (issue 43)") == (
        "install-footprint-and-cold-start-issue-43"
    )


def test_a_broken_link_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    (tmp_path / "target.md").write_text("# Real heading\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](target.md#real-heading) [gone](missing.md) [no anchor](target.md#nope)\n"
        "```\n[in code](missing-too.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "page.md:1: missing.md: no file missing.md",
        "page.md:1: target.md#nope: no heading #nope in target.md",
    ]
