"""The README and ``docs/`` link only to files and headings that exist, and the README stays
a README (a newcomer's five minutes, not the manual)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    found, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#+ (.*)", line)):
            found.add(_slug(m.group(1)))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_link_reaches_a_file_and_heading(doc: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(f"{target}: no file {path}")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.name}")
    assert not broken, broken


def test_the_readme_is_short() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 220


@pytest.mark.parametrize("doc", [d for d in DOCS if d.name != "README.md"], ids=lambda p: p.name)
def test_a_long_page_opens_with_its_contents(doc: Path) -> None:
    """A docs page over 200 lines lists, before its first section, a link to every one of its
    ``##`` sections, so a reader finds their way without scrolling a diary."""
    text = doc.read_text()
    if len(text.splitlines()) <= 200:
        return
    head, _, _ = text.partition("\n## ")
    listed = set(re.findall(r"\]\(#([^)\s]+)\)", head))
    sections, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("## "):
            sections.append(_slug(line[3:]))
    assert sections and not set(sections) - listed, set(sections) - listed


def test_the_design_layout_names_every_module() -> None:
    """docs/design.md's Layout is the map a newcomer reads first: every module of the package
    (and the JVM helper) is named in it."""
    text = (REPO / "docs" / "design.md").read_text()
    layout = text[text.index("## Layout"):text.index("\n## ", text.index("## Layout") + 5)]
    package = REPO / "compactor"
    missing = [str(p.relative_to(package)) for p in sorted(package.rglob("*.py"))
               if p.name not in ("__init__.py", "__main__.py") and p.stem not in layout]
    missing += [str(p.relative_to(package)) for p in sorted(package.rglob("*.java"))
                if p.name not in layout]
    assert missing == []
