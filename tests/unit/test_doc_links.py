"""Every relative link in the repository's Markdown (the README, docs/, BENCHMARKS.md, and the pages
beside the code: alerts/, deploy/, tests/, …) points to a file or folder of the repository, and every
``#anchor`` to a heading of its page (GitHub's slugs: lowercase, spaces to ``-``, punctuation other
than ``-`` and ``_`` dropped, ``-1``, ``-2`` … after repeated headings). Links inside code spans and
fenced code are text, not links, and are not checked; web addresses are not checked."""

from __future__ import annotations

import os
import re
from collections import Counter
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.harness import REPO


def _pages() -> list[Path]:
    """Every Markdown file of the repository, outside hidden folders (.git, .venv, caches) and build
    output (a wheel build copies the package's documents into build/)."""
    found = []
    for folder, subfolders, files in os.walk(REPO):
        subfolders[:] = sorted(
            name for name in subfolders if not name.startswith(".") and name not in ("__pycache__", "build", "dist")
        )
        found += [Path(folder) / name for name in files if name.endswith(".md")]
    return sorted(found)


PAGES = _pages()

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1)(?!\n\n)[\s\S])+?\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def _unfenced(text: str) -> list[str]:
    """The lines of ``text``, those of fenced code (and the fences) emptied so numbering holds."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            line = ""
        lines.append("" if fenced else line)
    return lines


def _prose(text: str) -> str:
    """``text`` outside fenced code, code spans (which may wrap) blanked, line numbering kept."""
    return _CODE_SPAN.sub(lambda span: "``" + "\n" * span.group().count("\n"), "\n".join(_unfenced(text)))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors GitHub gives ``page``: one per heading, repeated slugs numbered, and HTML anchors."""
    seen: Counter[str] = Counter()
    found = set()
    text = page.read_text()
    for line in _unfenced(text):
        if heading := _HEADING.match(line):
            base = slug(heading.group(2))
            found.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    found.update(_HTML_ANCHOR.findall(text))
    return frozenset(found)


def links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every link and image of ``page`` outside code; link text may wrap."""
    prose = _prose(page.read_text())
    found = [(prose.count("\n", 0, link.start()) + 1, link.group(1)) for link in _LINK.finditer(prose)]
    for number, line in enumerate(prose.splitlines(), 1):
        if reference := _REFERENCE.match(line):
            found.append((number, reference.group(1)))
    return sorted(found, key=lambda item: item[0])  # stable: in order within a line


def broken(page: Path) -> list[str]:
    """What is wrong with the relative links of ``page``, one line each."""
    problems, root = [], REPO.resolve()
    for number, target in links(page):
        if _SCHEME.match(target):
            continue  # http(s), mailto: not checked here
        where = f"{page.relative_to(REPO)}:{number}: {target}"
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / unquote(path_part)).resolve() if path_part else page
        if path_part.startswith("/") or not destination.is_relative_to(root):
            problems.append(f"{where}: points outside the repository")
        elif not destination.exists():
            problems.append(f"{where}: no such file")
        elif anchor and destination.suffix == ".md" and unquote(anchor) not in anchors(destination):
            problems.append(f"{where}: no heading #{anchor} in {destination.relative_to(root)}")
    return problems


def test_the_pages_are_found() -> None:
    names = {str(page.relative_to(REPO)) for page in PAGES}
    assert {"README.md", "BENCHMARKS.md", "docs/metrics.md", "docs/runbooks/README.md", "alerts/README.md"} <= names
    assert not any(name.startswith(".") for name in names)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    assert not broken(page), "\n".join(broken(page))


def test_slugs_follow_github() -> None:
    assert slug("Status page, snapshot and doctor") == "status-page-snapshot-and-doctor"
    assert slug("Workload attribution: processes, pods and jobs") == "workload-attribution-processes-pods-and-jobs"
    assert slug("`gpu-exporter snapshot` and `--json`") == "gpu-exporter-snapshot-and---json"
    assert slug("Backends: DCGM or NVML") == "backends-dcgm-or-nvml"
    assert slug("Hostile load (issue 30)") == "hostile-load-issue-30"
    assert slug("snake_case stays") == "snake_case-stays"


def test_a_broken_link_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker itself: a missing file, a missing heading, a link out of the repository, while a
    link in code, a good anchor and a web address pass."""
    import tests.unit.test_doc_links as module

    docs = tmp_path / "docs"
    docs.mkdir()
    (tmp_path / "README.md").write_text("# Top\n\n## Two words\n")
    page = docs / "page.md"
    page.write_text(
        "# Page\n\n[ok](../README.md#two-words) [web](https://example.com/x) `[code](missing.md)`\n"
        "```\n[fenced](missing.md)\n```\n"
        "[gone](missing.md) [bad anchor](../README.md#three) [self](#page) [self bad](#nope) [out](../../x)\n"
        "## The `snapshot` command\n\n[a link whose text\nwraps](missing-too.md) [code](#the-snapshot-command)\n"
    )
    monkeypatch.setattr(module, "REPO", tmp_path)
    problems = broken(page)
    assert [problem.split(": ", 1)[1] for problem in problems] == [
        "missing.md: no such file",
        "../README.md#three: no heading #three in README.md",
        "#nope: no heading #nope in docs/page.md",
        "../../x: points outside the repository",
        "missing-too.md: no such file",
    ]
