"""The README and the docs hold together: links resolve, CI runs the README's test command, the README stays short."""

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted([README, *(ROOT / "docs").glob("*.md")])
MAX_README_LINES = 300

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for i, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield i, line


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lowercased, punctuation but '-' and '_'
    dropped, spaces as '-'."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)  # inline code: its text
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"[*]", "", text)  # emphasis markers
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set:
    """Every heading anchor of a Markdown file, with GitHub's -1, -2 ... for repeats."""
    seen: dict = {}
    out = set()
    for _, line in prose_lines(path.read_text()):
        m = _HEADING.match(line)
        if not m:
            continue
        a = anchor(m.group(2))
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else f"{a}-{n}")
    return out


def internal_links(path: Path):
    """(line, target) of every link that is not to another site."""
    for i, line in prose_lines(path.read_text()):
        for m in _LINK.finditer(line):
            target = m.group(1)
            if not _EXTERNAL.match(target):
                yield i, target


def broken_links(path: Path, root: Path = ROOT) -> list:
    """What is wrong with each internal link of ``path``: a missing file or a missing heading."""
    problems = []
    for line, target in internal_links(path):
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path.resolve()
        where = f"{path.relative_to(root)}:{line}: [{target}]"
        if not dest.exists():
            problems.append(f"{where}: no file {file_part}")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{where}: no heading with anchor #{fragment} in {dest.relative_to(root.resolve())}")
    return problems


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_internal_link_resolves(path):
    assert not broken_links(path), "\n".join(broken_links(path))


def test_anchor_follows_githubs_rules():
    assert anchor("The plan simulator") == "the-plan-simulator"
    assert anchor("ESL: ESCHER scheduling libraries") == "esl-escher-scheduling-libraries"
    assert anchor("`ray-adaptive reproduce [--quick]`") == "ray-adaptive-reproduce---quick"
    assert anchor("bench_runtime: the runtime against plain Ray") == "bench_runtime-the-runtime-against-plain-ray"
    assert anchor("The compiler's choice") == "the-compilers-choice"


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("## Part two\n")
    page.write_text("# Title\n\n[ok](#title) [gone](#nowhere) [file](missing.md)\n"
                    "[there](other.md#part-two) [not there](other.md#part-three)\n\n```\n[in code](#ignored)\n```\n")
    assert broken_links(page, root=tmp_path) == [
        "page.md:3: [#nowhere]: no heading with anchor #nowhere in page.md",
        "page.md:3: [missing.md]: no file missing.md",
        "page.md:4: [other.md#part-three]: no heading with anchor #part-three in other.md",
    ]


def readme_test_command() -> str:
    """The README's second command: the second line of its first bash block, without the comment."""
    text = README.read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, "README.md has no ```bash block"
    lines = block.group(1).splitlines()
    assert len(lines) >= 2, "the README's first bash block should hold two commands: set up + demo, set up + tests"
    return lines[1].split("  #", 1)[0].strip()


def ci_commands() -> list:
    """The commands .ci/run runs, after its shell set-up (shebang, comments, `set`, `cd`)."""
    out = []
    for line in (ROOT / ".ci" / "run").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if shlex.split(line)[0] in ("set", "cd"):
            continue
        out.append(line)
    return out


def test_ci_runs_exactly_the_readmes_test_command():
    assert ci_commands() == [readme_test_command()]


def test_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; keep it under {MAX_README_LINES} (details go to docs/)"
