"""No typed number in README.md or docs/results.md that a generated file under results/ does not hold (issue 50).

A number a guide states about the runs must be one the report wrote: a table of results/tables/ (orderings.md,
the thesis tables, quality_summary, study_times, ...) or a measurement's JSON (results/noise_scale/*.json). A number
typed by hand drifts from the runs; this test finds it.

What counts as a typed number, and what is skipped (each rule says why):
- skipped: fenced code blocks, inline code spans, HTML comments and link targets -- commands, paths, config values
  and the generated blocks' markers, not statements about the runs;
- skipped: a number glued to a letter, an underscore, a slash or a dot-word (vm-2cpu, rq4, 18ep, B_simple, 4k, H100,
  exp12): part of a name;
- skipped: dates (2026-11-24), times (02:14) and years (1900-2099): when, not what was measured;
- skipped: a number (or a list or range of them) right after a word that numbers things -- experiment(s), exp,
  Table(s), Figure(s), Fig., section(s), issue, step, Step, version, Python, seed(s) -- numbering, not a result;
- skipped: a version after a tool's name (TF >= 2.19, Python 3.11);
- every other number is checked, signed where a sign is written (the Unicode minus as '-'): it holds when a
  generated file has a number that rounds to it at the decimals typed (76.35 holds 76.350 and 76.3496; +1.58 holds
  1.584), or, unsigned, whose magnitude does;
- an interval typed as `x [a, b]` holds only when one line of one generated file (a table's row, a JSON record) holds
  all three: with thousands of generated numbers a lone short number is often held by chance, a row's three
  together are not.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GUIDES = [REPO / "README.md", REPO / "docs" / "results.md"]
GENERATED = [*sorted((REPO / "results" / "tables").glob("*.md")), *sorted((REPO / "results" / "tables").glob("*.csv")),
             *sorted((REPO / "results" / "noise_scale").glob("*.json"))]

SKIPPED_SPANS = [r"```.*?```", r"`[^`\n]*`", r"<!--.*?-->", r"\]\([^)]*\)"]
DATES = r"\b(?:19|20)\d\d-\d\d-\d\d(?:T\d\d:\d\dZ?)?\b|\b\d\d:\d\d(?::\d\d)?Z?\b|\b(?:19|20)\d\d\b"
NUMBERING = (r"\b(?:experiments?|exp|Tables?|Figures?|Fig\.|sections?|issues?|[Ss]teps?|version|seeds?|"
             r"(?:Python|TF|TensorFlow|PyTorch|torch|Horovod|CUDA)\s*(?:≥|>=|≤|<=|==)?)"
             r"\s+\d+(?:\.\d+)*(?:\s*(?:,|–|-|and|or)\s*\d+(?:\.\d+)*)*")
# a number: an optional sign (not a range's dash: no digit before it), digits with optional thousands commas and
# decimals, glued to no name on either side
SIGNED = r"[+\-−]?\d+(?:\.\d+)?"
INTERVAL = re.compile(rf"(?<![\w.])({SIGNED})\s*\[({SIGNED}),\s*({SIGNED})\]")
NUMBER = re.compile(r"(?<![\w./\-−+])([+\-−]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![\w/]|\.\d)")


def readable(text: str) -> str:
    """A guide's text without what the module's rules skip (code, comments, link targets, dates, numbering)."""
    for pattern in SKIPPED_SPANS:
        text = re.sub(pattern, " ", text, flags=re.S)
    for pattern in (DATES, NUMBERING):
        text = re.sub(pattern, " ", text)
    return text


def typed_numbers(text: str) -> list[tuple[str, float, int, bool]]:
    """(as typed, value, decimals, signed) of each number in a guide's text that the module's rules check."""
    text = re.sub(r"(?<=\d)[–-](?=[+\-−]?\d)", " – ", text)  # a range 19–27: two numbers, the second unsigned
    out = []
    for m in NUMBER.finditer(text):
        sign, whole, decimals = m.group(1), m.group(2).replace(",", ""), m.group(3) or ""
        value = float(f"{whole}.{decimals}" if decimals else whole) * (-1 if sign in "-−" and sign else 1)
        out.append((m.group(0), value, len(decimals), bool(sign)))
    return out


def _line_numbers(line: str) -> frozenset[float]:
    tokens = re.findall(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:e[+-]?\d+)?|-?\d+(?:\.\d+)?(?:e[+-]?\d+)?", line)
    return frozenset(float(x.replace(",", "")) for x in tokens)


def generated_rows(paths=GENERATED) -> list[frozenset[float]]:
    """The numbers of each line of the generated files (a table's row; a JSON's record): what one row holds."""
    rows = []
    for path in paths:
        text = path.read_text(errors="replace")
        if path.suffix == ".json":
            found = json.loads(text)
            text = "\n".join(json.dumps(r) for r in (found if isinstance(found, list) else [found]))
        rows += [_line_numbers(line) for line in text.splitlines()]
    return rows


def generated_numbers(paths=GENERATED) -> list[float]:
    """Every number written in the generated files."""
    return [x for row in generated_rows(paths) for x in row]


def held(value: float, decimals: int, signed: bool, generated: set[float]) -> bool:
    """Whether a generated number rounds to the typed one at its decimals (by magnitude when typed unsigned)."""
    half = 0.5 * 10 ** -decimals + 1e-9
    if signed:
        return any(abs(g - value) <= half for g in generated)
    return any(abs(abs(g) - abs(value)) <= half for g in generated)


def unheld(text: str, generated: set[float], rows: list[frozenset[float]] = ()) -> list[str]:
    """The typed numbers no generated number holds, then the typed intervals no generated row holds whole."""
    text = readable(text)
    missing = [typed for typed, value, decimals, signed in typed_numbers(text)
               if not held(value, decimals, signed, generated)]
    for interval in re.finditer(INTERVAL, text):
        three = [typed_numbers(interval.group(i))[0] for i in (1, 2, 3)]
        if not any(all(held(v, d, s, row) for _, v, d, s in three) for row in rows):
            missing.append(interval.group(0))
    return missing


@pytest.fixture(scope="module")
def generated() -> set[float]:
    return set(generated_numbers())


@pytest.fixture(scope="module")
def rows() -> list[frozenset[float]]:
    return [row for row in generated_rows() if row]


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.name)
def test_every_typed_number_in_the_guide_is_one_a_generated_file_holds(guide, generated, rows):
    missing = unheld(guide.read_text(), generated, rows)
    assert not missing, (f"{guide.relative_to(REPO)} types numbers no generated file under results/ holds: "
                         f"{missing}; generate the sentence, or take the number out")


def test_a_planted_number_fails_and_the_skip_rules_keep_names_dates_and_numbering_out(generated, rows):
    # a result no table holds, typed into a sentence: found, alone and as an interval
    assert unheld("LARS at 256 workers is −13.17 against the baseline.", generated, rows) == ["−13.17"]
    # an interval whose three numbers each appear somewhere, but in no one row: found
    assert all(held(v, 2, True, generated) for v in (-1.07, -1.83, -0.15))
    assert unheld("exp 6 at 32: −1.07 [−1.83, −0.15]", generated, rows) == ["−1.07 [−1.83, −0.15]"]
    assert unheld("exp 6 at 32: −1.07 [−1.83, −0.31]", generated, rows) == []  # orderings.md's row
    # names, dates, numbering, code: never read as results
    said = typed_numbers(readable("On 2026-11-24 at 02:14Z, experiments 4–9 and Tables 11-15 (section 5.8) ran on vm-2cpu "
                         "in rq4 with B_simple, `make exp12 JOBS=2`, Python 3.11, TF ≥ 2.19, 4k batch, in 2019."))
    assert said == []
    # a range's dash is no sign; a thousands comma is no list; the Unicode minus is a sign
    assert [(t, v, d, s) for t, v, d, s in typed_numbers("19–27 minutes, 1,011 images, −0.16 and +2.04")] == [
        ("19", 19.0, 0, False), ("27", 27.0, 0, False), ("1,011", 1011.0, 0, False), ("−0.16", -0.16, 2, True),
        ("+2.04", 2.04, 2, True)]
    assert held(1.58, 2, True, {1.584}) and not held(1.58, 2, True, {-1.584}) and held(1.58, 2, False, {-1.584})


# ---- words against what was run: the committed reference's frameworks -----------------------------------------------
def reference_frameworks() -> set[str]:
    """The frameworks the committed reference's runs trained with (their config.json's train.framework)."""
    return {(json.loads(p.read_text()).get("train") or {}).get("framework") or "pytorch"
            for p in (REPO / "results" / "reference").glob("*/*/*/config.json")}


def test_the_guides_say_tensorflow_ran_in_the_committed_reference_only_if_it_did():
    ran = "tensorflow" in reference_frameworks()
    said_none = {p.name: "holds no TensorFlow run" in re.sub(r"\s+", " ", p.read_text())
                 for p in (REPO / "README.md", REPO / "docs" / "scales.md")}
    assert said_none == {name: not ran for name in said_none}, (
        "README.md and docs/scales.md must say whether the committed reference (results/reference/) holds a "
        f"TensorFlow run: it {'does' if ran else 'does not'}")
