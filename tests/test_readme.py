"""The README a newcomer reads first: the quick start on the first screen, short, every guide it names present, and
its headline of the findings the verdict table's own words (copied by `make reference-report`, never typed)."""
import re

from analysis.headline import ORDERINGS, README, block, readme_block
from tests.helpers import REPO


def test_the_quick_start_is_on_the_first_screen_and_the_readme_is_short():
    lines = README.read_text().splitlines()
    assert "## Quick start" in lines[:15]
    assert len(lines) < 200


def test_every_guide_the_readme_names_exists():
    named = set(re.findall(r"`((?:docs|slurm|experiments)/[\w./-]+\.md)`", README.read_text()))
    assert {"docs/cluster.md", "docs/scales.md", "docs/gpu.md", "docs/imagenet.md"} <= named
    assert [path for path in sorted(named) if not (REPO / path).exists()] == []


def test_the_headline_is_the_verdict_tables_summary():
    current = readme_block(README.read_text())
    assert current is not None, "README.md lost its headline markers"
    assert current == block(ORDERINGS.read_text()), "run `make reference-report` (python -m analysis headline --write)"
    assert "naive_degrades" in current and "warmup_matches_baseline" in current
