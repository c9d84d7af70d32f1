"""The README and the documentation site (docs/, mkdocs.yml): every relative link leads somewhere.

CI also builds the site with `mkdocs build --strict`; these checks need no mkdocs, so a broken link
fails the plain test run too.
"""

import re
import unicodedata
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The page without code, where brackets and `#` are not links or headings."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """The anchor mkdocs (Python-Markdown's toc) gives a heading; GitHub agrees for plain headings."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    seen: set[str] = set()
    for _, heading in HEADING.findall(_prose(page.read_text())):
        base = anchor = slug(heading)
        n = 0
        while anchor in seen:  # repeated headings get _1, _2, ... as in Python-Markdown
            n += 1
            anchor = f"{base}_{n}"
        seen.add(anchor)
    return seen


def links(page: Path) -> list[str]:
    return LINK.findall(INLINE_CODE.sub("", _prose(page.read_text())))


def test_the_pages_are_found():
    names = {page.name for page in PAGES}
    assert {"README.md", "index.md", "columns.md"} <= names and len(PAGES) > 3


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_anchor_that_exist(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif page.parent == DOCS and not file.is_relative_to(DOCS):
            broken.append(f"{target}: outside docs/, which the site cannot link to")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {file.name}")
    assert not broken, f"broken links in {page.relative_to(ROOT)}: {broken}"


def test_the_site_lists_every_page_and_only_pages_that_exist():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = [page for entry in config["nav"] for page in entry.values()]
    assert sorted(nav) == sorted(page.name for page in DOCS.glob("*.md"))


def test_ci_runs_the_readme_commands():
    setup = re.search(r"^## Set up\n.*?^```bash\n(.*?)^```", (ROOT / "README.md").read_text(),
                      re.DOTALL | re.MULTILINE)
    assert setup, "README.md has no Set up section with a bash block"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = setup.group(1).strip().splitlines()
    assert len(commands) == 2 and all(command in ci for command in commands), (commands, ci)


def test_the_readme_the_index_and_the_site_list_the_pages_in_one_order():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = [page for entry in config["nav"] for page in entry.values() if page != "index.md"]
    readme = re.search(r"^## Documentation\n(.*?)^## ", (ROOT / "README.md").read_text(),
                       re.DOTALL | re.MULTILINE)
    assert readme, "README.md has no Documentation section"
    listed = [link.removeprefix("docs/") for link in LINK.findall(readme.group(1)) if link != "docs/index.md"]
    index = [link for link in links(DOCS / "index.md") if "/" not in link and "#" not in link]
    assert listed == nav, f"README.md lists the pages as {listed}; mkdocs.yml's nav: {nav}"
    assert index == nav, f"docs/index.md lists the pages as {index}; mkdocs.yml's nav: {nav}"


def test_the_readme_stays_a_front_door_of_at_most_250_lines():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 250, f"README.md has {lines} lines: move the detail to docs/ and link it"


README_WIDTH = 120
"""The README's widest line: a front door that reads in a terminal and a diff, code blocks and tables too."""


def test_the_readmes_lines_are_at_most_120_characters():
    wide = [f"line {number}: {len(line)} characters" for number, line in
            enumerate((ROOT / "README.md").read_text().splitlines(), 1) if len(line) > README_WIDTH]
    assert not wide, f"README.md: wrap these lines (a table row: split it or make it a list): {wide}"
