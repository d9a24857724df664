"""The README is a newcomer's guide and the reference lives in docs/ (issue 27): the README stays at most 300 lines,
every relative link in it and in docs/*.md reaches a file (and a heading, when it names one), and the README links
at least six docs pages."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^ *```.*?^ *```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(path: Path) -> str:
    """The page without fenced blocks and code spans, where a `](...)` is no link."""
    return CODE_SPAN.sub("", FENCE.sub("", path.read_text()))


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path)) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in FENCE.sub("", path.read_text()).splitlines():
        heading = re.match(r"#{1,6} +(.*?) *#* *$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).replace("`", "").lower()).replace(" ", "-")
            count = counts.get(slug, 0)
            found.add(f"{slug}-{count}" if count else slug)
            counts[slug] = count + 1
    return found


def test_the_readme_is_a_guide_of_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= 300


def test_every_relative_link_reaches_a_file_and_heading():
    broken = []
    for page in PAGES:
        for target in relative_links(page):
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
            elif ROOT not in dest.parents and dest != ROOT:
                broken.append(f"{page.relative_to(ROOT)}: {target} (outside the repository)")
    assert not broken, "\n".join(broken)


def test_the_readme_links_at_least_six_docs_pages():
    pages = {t.partition("#")[0] for t in relative_links(README) if re.match(r"docs/[\w.-]+\.md(#|$)", t)}
    assert len(pages) >= 6, sorted(pages)
    assert all((ROOT / p).is_file() for p in pages)


def test_the_anchor_rule_matches_githubs():
    page = ROOT / "docs" / "exit-codes.md"
    assert "exit-codes" in anchors(page)
    readme = anchors(README)
    assert "set-up-on-a-fresh-machine-debian-python-311-root-no-npu" in readme
