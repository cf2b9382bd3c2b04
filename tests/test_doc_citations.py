"""The docs and docstrings cite only what a reader of the repository can open: no team-internal
design files (DESIGN.md, specs/...), and every docs/*.md they name exists."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEXTS = sorted([*(REPO / "docs").glob("*.md"), REPO / "README.md", *(REPO / "src").rglob("*.py")])
INTERNAL = re.compile(r"DESIGN\.md|specs?/[\w-]+\.md|losses-and-advantages|objectives-wave2|rollouts-data-agents|"
                      r"rewards-eval-diffusion|agents-and-scale|\bspecs? §|project spec")


def test_no_citations_of_files_outside_the_repository():
    found = [f"{p.relative_to(REPO)}:{i}: {line.strip()}" for p in TEXTS
             for i, line in enumerate(p.read_text().splitlines(), 1) if INTERNAL.search(line)]  # fmt: skip
    assert found == []


def test_every_cited_docs_page_exists():
    cited = {m for p in TEXTS for m in re.findall(r"docs/[\w-]+\.md", p.read_text())}
    assert cited  # the docstrings do point at the docs
    assert sorted(c for c in cited if not (REPO / c).is_file()) == []


def test_the_pattern_catches_what_it_should():
    for bad in ("see DESIGN.md", "Spec: shared/specs/rollouts-data-agents.md §10", "(spec §3.14)",
                "the project spec `losses-and-advantages.md` §0", "(objectives-wave2 §2.29)",
                "rewards-eval-diffusion §2.8"):  # fmt: skip
        assert INTERNAL.search(bad), bad
    assert not INTERNAL.search("RewardSpec(name=...)") and not INTERNAL.search("importlib.util.find_spec")
