"""The verdict table in words: the short table orderings.md shows, one line per finding and scale saying where it
holds, and the pieces the plug-ins' readings (the notebooks' "Reading" cells) say a row with. Each takes the
findings the verdicts were made of (analysis.entries.Finding: which group by optimizer, which side diverges).
"""
from __future__ import annotations

import math

import pandas as pd

from . import numbers as nb
from .findings import OPTIMIZERS, holds
from .smoke import SMOKE

# `holds` words of rows that claim nothing: n/a (nothing claimed there), diverged (every run diverged: no verdict)
NO_CLAIM = ("n/a", "diverged")


def markdown(text: str):
    """Display a reading in a notebook (the cell's last line)."""
    from IPython.display import Markdown

    return Markdown(text)


def pts(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.1f}"


def _zero(r) -> str:
    """Whether 0 lies inside the interval: 'equivalent' within a margin can still be measurably below 0."""
    if pd.isna(r.ci_low) or pd.isna(r.ci_high):
        return "no interval"
    if r.ci_low <= 0 <= r.ci_high:
        return "0 inside"
    return "excludes 0: measurably " + ("below" if r.ci_high < 0 else "above")


def _against_margin(verdict: str, margin: float) -> str:
    return {"equivalent": f"equivalent within ±{margin:g}", "worse": f"worse beyond -{margin:g}",
            "better": f"better beyond +{margin:g}"}.get(verdict, f"{verdict} against ±{margin:g}")


def _seeds(r) -> str:
    n, m = r.n, r.n_against
    return "" if pd.isna(n) else f"{int(n)} vs {int(m)} seeds" if not pd.isna(m) else f"{int(n)} seeds"


def declared(findings, name: str):
    """The finding of that name among those declared (None where none is)."""
    return next((f for f in findings if f.name == name), None)


def row_name(r, findings) -> str:
    """'exp 6 at 32', or with its optimizer where its finding's rows vary it (Finding.by): 'exp 12 lars at 256'."""
    f = declared(findings, r.finding)
    named = f is not None and "optimizer" in f.by and isinstance(r.optimizer, str)
    return f"exp {int(r.experiment)}{' ' + r.optimizer if named else ''} at {int(r.workers)}"


def row_text(r, findings) -> str:
    """'exp 6 at 32 workers: -1.07 points, 90 % CI -1.8 to -0.3 (excludes 0: measurably below), equivalent within
    ±2, 7 vs 7 seeds; thesis -0.4' -- everything the interval says, nothing more."""
    thesis = r.thesis_difference
    return (f"{row_name(r, findings)} workers: {pts(r.difference)} points, 90 % CI "
            f"{pts(r.ci_low)} to {pts(r.ci_high)} ({_zero(r)}), {_against_margin(r.verdict, r.margin)}"
            + (f", {_seeds(r)}" if _seeds(r) else "")
            + ("" if pd.isna(thesis) else f"; thesis {pts(float(thesis))}"))


def in_order(g: pd.DataFrame) -> pd.DataFrame:
    """Rows by experiment, then optimizer (the declared order of OPTIMIZERS: SGD first), then workers."""
    rank = g["optimizer"].map({name: i for i, name in enumerate(OPTIMIZERS)})
    return g.assign(_rank=rank).sort_values(["experiment", "_rank", "workers"], kind="stable").drop(columns="_rank")


def said(g: pd.DataFrame) -> list[str]:
    """Per row: yes / no / undecided / n/a (the table's `holds`)."""
    return ["n/a" if pd.isna(h) else str(h) for h in g["holds"]]


def against_baseline(finding) -> bool:
    """A finding that holds where its rows match a 1-worker baseline: one whose interval excludes 0 is named."""
    return finding is not None and finding.holds == "equivalent" and any(
        c.control.workers == 1 for c in finding.comparisons)


def finding_summary(verdicts: pd.DataFrame, findings) -> list[str]:
    """One line per finding and scale: in how many of its rows it holds, which rows, and where a row that holds has
    an interval excluding 0 (equivalent only by the margin). A finding holds only as far as its rows do."""
    v = verdicts.copy()
    v["where"] = v["scale"].fillna("unknown") + v["numerics"].map(lambda n: nb.numerics_suffix(n, ", "))
    smoke = v["verdict"] == SMOKE  # smoke runs' rows (never pooled with full ones): a line of their own, no verdict
    lines = [f"{finding} ({where} scale, {len(g)} rows of smoke runs): {SMOKE}."
             for (where, finding), g in v[smoke].groupby(["where", "finding"], sort=True)]
    for (where, finding), g in v[~smoke].groupby(["where", "finding"], sort=True):
        lines.append(_summary_line(where, finding, in_order(g), findings))
    return lines


def _summary_line(where: str, finding: str, g: pd.DataFrame, findings) -> str:
    supports = said(g)
    rows = [row_name(r, findings) for r in g.itertuples()]
    claimed = [s for s in supports if s not in NO_CLAIM]
    yes = [row for row, s in zip(rows, supports) if s == "yes"]
    word = "holds" if claimed and set(claimed) == {"yes"} else "does not hold" if "yes" not in claimed else "mixed"
    parts = [f"{len(yes)} of {len(claimed)} rows support it" + (f" ({', '.join(yes)})" if yes else "")]
    for label, key in (("undecided", "undecided"), ("fails", "no"), ("claims nothing", "n/a"), ("diverged", "diverged")):
        hit = [row for row, s in zip(rows, supports) if s == key]
        if hit:
            parts.append(f"{label} in {len(hit)} ({', '.join(hit)})")
    below = [f"{row_name(r, findings)} ({pts(r.difference)} [{pts(r.ci_low)}, {pts(r.ci_high)}])"
             for r, s in zip(g.itertuples(), supports) if s == "yes" and
             against_baseline(declared(findings, finding)) and _zero(r).startswith("excludes")]
    if below:
        parts.append("equivalent only by the margin, its interval excluding 0, at " + ", ".join(below))
    looked = _only_after_a_look(declared(findings, finding), g, supports, findings)
    if looked:
        parts.append("holds only with seeds added after a look at " + ", ".join(looked))
    return f"{finding} ({where} scale): {word} -- " + "; ".join(parts) + "." + holm_words(g, supports, findings)


def _only_after_a_look(finding, g: pd.DataFrame, supports: list[str], findings) -> list[str]:
    """The rows that support the finding only with seeds added after a look at an interval: their declared seeds
    alone (orderings.csv declared_*) would not, by the same rule -- each named with that interval and verdict."""
    out = []
    for r, s in zip(g.itertuples(), supports):
        verdict = r.declared_verdict
        if s != "yes" or not isinstance(verdict, str) or verdict == SMOKE or finding is None:
            continue
        if holds(finding.holds, float(r.declared_ci_low), verdict, float(r.margin)) != "yes":
            out.append(f"{row_name(r, findings)} (its declared seeds alone: {r.declared_difference:+.2f} "
                       f"[{r.declared_ci_low:+.2f}, {r.declared_ci_high:+.2f}], {verdict})")
    return out


def holm_words(g: pd.DataFrame, supports: list[str], findings) -> str:
    """' After Holm's correction over its N rows: K support it (rows).'"""
    rows = [row_name(r, findings) for r in g.itertuples()]
    yes = [row for row, h in zip(rows, g["holds_holm"]) if h == "yes"]
    claimed = [s for s in supports if s not in NO_CLAIM]
    return (f" After Holm's correction over its {len(claimed)} rows: {len(yes)} of {len(claimed)} support it"
            + (f" ({', '.join(yes)})" if yes else "") + ".")


def _interval_text(r, findings) -> str:
    """'+0.42 [-0.31, +1.15]' in the finding's measure's decimals, its unit said where it is not the thesis's
    points."""
    if pd.isna(r.difference):
        return ""
    f = declared(findings, r.finding)
    decimals, unit = (f.measure.decimals, f.measure.unit) if f is not None else (2, "points")
    ends = "" if pd.isna(r.ci_low) else f" [{r.ci_low:+.{decimals}f}, {r.ci_high:+.{decimals}f}]"
    return f"{r.difference:+.{decimals}f}{ends}" + ("" if unit == "points" else f" {unit}")


def _flag(r, findings) -> str:
    """A row's flag: its seeds added after a look, or its runs that diverged by its side's rule, left out."""
    look, gone = r.after_a_look, r.diverged
    flags = [look] if isinstance(look, str) and look else []
    if gone is not None and not pd.isna(gone) and int(gone):
        share = next(c.treated.diverged.share for c in declared(findings, r.finding).comparisons
                     if c.treated.experiment == r.experiment and c.treated.diverged)
        why = "a loss that is not finite" if math.isinf(share) else \
            f"their last training loss above {share:g} of their first epoch's, or not finite"
        flags.append(f"diverged: {int(gone)} of {int(gone) + int(r.n)} runs left out ({why})")
    return "; ".join(flags)


def verdict_table(verdicts: pd.DataFrame, findings) -> pd.DataFrame:
    """orderings.md's table, one short line a row: the comparison, its difference and 90 % interval, how the interval
    was computed, the per-row verdict, whether it supports the finding before and after Holm's correction, and the
    after-a-look flag (orderings.csv keeps every column). The scale, where the rows span more than one."""
    v = verdicts.reset_index(drop=True)
    out = pd.DataFrame({
        "finding": v["finding"],
        "comparison": [f"{row_name(r, findings)} vs {r.against}" for r in v.itertuples()],
        "seeds": [_seeds(r) for r in v.itertuples()],
        "difference [90 % interval]": [_interval_text(r, findings) for r in v.itertuples()],
        "method": v["method"], "verdict": v["verdict"], "holds": v["holds"], "holds after Holm": v["holds_holm"],
        "flag": [_flag(r, findings) for r in v.itertuples()],
    })
    where = v["scale"].fillna("unknown") + v["numerics"].map(lambda n: nb.numerics_suffix(n, ", "))
    return out.assign(scale=where)[["scale", *out.columns]] if where.nunique() > 1 else out
