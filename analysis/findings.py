"""The findings the plug-ins declare (analysis.entries.Finding), tested as equivalences with a declared margin, at
each scale: the verdict table (`orderings`).

Each row is a difference "treated minus control" of the finding's measure (Finding.measure; the thesis's findings:
best validation top-1, as the thesis's tables record the best epoch: its scripts keep best_acc1, and its text reports
"best Top-1/Top-5") between one comparison's two sides, a row per group of the treated runs (Finding.by); a side's
runs that diverged by its rule are left out and counted in `diverged`. A measure where lower is better (a loss) is
compared negated, so that every function below reads higher as better, and its rows are given back in its own
direction (as_measured). The verdict (`verdict`), what supports a finding (`holds`, by its declared direction), Holm's
family-wise view (`holds_holm`), the seeds a verdict would need and the after-a-look flag are each a function below;
notes() says them as the table does. The margin of each scale is declared with its reason in experiments/scales.toml
[margins.<scale>]; a measure may declare its own (Measure.margins), in its own unit.
"""
from __future__ import annotations

import fnmatch
import functools
import math
import tomllib
from pathlib import Path

import pandas as pd
from scipy import stats


from .smoke import SMOKE, diverged_runs, smoke_paths

COLUMNS = ["scale", "numerics", "finding", "experiment", "workers", "warmup", "optimizer", "against", "n", "n_against",
           "difference", "ci_low", "ci_high", "margin", "unit", "verdict", "holds", "method", "p", "p_holm",
           "holds_holm", "seeds_needed", "needed_for", "final_difference", "final_ci_low", "final_ci_high",
           "final_verdict", "after_a_look", "declared_n", "declared_n_against", "declared_difference",
           "declared_ci_low", "declared_ci_high", "declared_verdict", "thesis_difference", "diverged"]
PAIRED, WELCH = "paired by seed", "Welch (unpaired)"  # `method`: how the interval was computed
ALPHA = (1 - 0.90) / 2  # each end of the 90 % interval is a one-sided test at 5 %: Holm's family-wise level
OPTIMIZERS = ("sgd", "lars", "lamb", "radam")  # the order rows and curves take
CONFIDENCE = 0.90
SCALES_FILE = Path(__file__).resolve().parents[1] / "experiments" / "scales.toml"
MOST_SEEDS = 1000  # seeds_needed searches up to this many
#: a row's differences and interval ends: a measure where lower is better is compared negated (higher is better,
#: as verdict, holds and the tests read it), then these are turned back into its own direction (as_measured)
SIGNED = ("difference", "final_difference", "declared_difference")
INTERVALS = (("ci_low", "ci_high"), ("final_ci_low", "final_ci_high"), ("declared_ci_low", "declared_ci_high"))


def margins(path: Path = SCALES_FILE) -> dict[str, dict]:
    """{scale: {"points": m, "reason": why}} from experiments/scales.toml [margins.<scale>]."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f).get("margins", {})
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def verdict(ci_low: float, ci_high: float, margin: float) -> str:
    """equivalent / worse / better / inconclusive: where the 90 % interval lies against (-margin, margin)."""
    if any(math.isnan(x) for x in (ci_low, ci_high, margin)):
        return "inconclusive"
    if -margin < ci_low and ci_high < margin:
        return "equivalent"
    if ci_high < -margin:
        return "worse"
    if ci_low > margin:
        return "better"
    return "inconclusive"


def holds(direction: str, ci_low: float, verdict_: str, margin: float) -> str:
    """Whether the verdict supports a finding of that direction (Finding.holds): yes, no, or undecided."""
    if direction == "worse":
        return {"worse": "yes", "equivalent": "no", "better": "no"}.get(verdict_, "undecided")
    if direction == "not worse":
        if not math.isnan(ci_low) and ci_low > -margin:
            return "yes"
        return "no" if verdict_ == "worse" else "undecided"
    return {"equivalent": "yes", "worse": "no", "better": "no"}.get(verdict_, "undecided")


def same_seeds(a: pd.Series, b: pd.Series) -> bool:
    """Both sides ran the same seeds (the index), each once, at least two: their differences are paired by seed."""
    return len(a) > 1 and a.index.is_unique and b.index.is_unique and set(a.index) == set(b.index)


def interval(a: pd.Series, b: pd.Series, paired: bool) -> dict:
    """mean(a) - mean(b) with its 90 % t interval (scipy.stats): paired over the shared index (seeds), or Welch's."""
    a, b = a.dropna().astype(float), b.dropna().astype(float)
    diff = float(a.mean() - b.mean()) if len(a) and len(b) else math.nan
    out = dict(difference=diff, ci_low=math.nan, ci_high=math.nan, se=math.nan, method="fewer than 2 runs a side")
    if len(a) < 2 or len(b) < 2:
        return out
    if paired:
        d = a.sort_index() - b.sort_index()
        se = float(d.std(ddof=1) / math.sqrt(len(d)))
        result = stats.ttest_rel(a.sort_index(), b.sort_index()) if se > 0 else None
        out.update(method=PAIRED)
    else:
        se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
        result = stats.ttest_ind(a, b, equal_var=False) if se > 0 else None
        out.update(method=WELCH)
    if result is None:  # no spread at all: the difference is exact
        out.update(ci_low=diff, ci_high=diff, se=0.0)
        return out
    ci = result.confidence_interval(CONFIDENCE)
    out.update(ci_low=float(ci.low), ci_high=float(ci.high), se=se)
    return out


def _half_width(n: int, sd_a: float | None, sd_b: float | None, sd_diff: float | None) -> float:
    """Half the 90 % interval with n seeds a side at the given spread (paired: sd of the differences)."""
    if sd_diff is not None:
        return stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * sd_diff / math.sqrt(n)
    va, vb = sd_a ** 2, sd_b ** 2
    dof = (n - 1) * (va + vb) ** 2 / (va ** 2 + vb ** 2)  # Welch-Satterthwaite with n a side
    return stats.t.ppf(0.5 + CONFIDENCE / 2, dof) * math.sqrt((va + vb) / n)


def seeds_needed(diff: float, sd_a: float | None, sd_b: float | None, sd_diff: float | None,
                 margin: float) -> tuple[int | None, str]:
    """(seeds a side, the verdict they would reach) if the difference and spread stayed as measured: the interval
    must fit inside the margin (equivalent) or beyond it (worse/better). None when no number would do."""
    target = "equivalent" if abs(diff) < margin else ("worse" if diff < 0 else "better")
    room = abs(abs(diff) - margin)
    spread = [x for x in (sd_a, sd_b, sd_diff) if x is not None]
    if any(math.isnan(x) for x in [diff, margin, *spread]) or room == 0 or not spread:
        return None, target
    if all(x == 0 for x in spread):
        return 2, target
    for n in range(2, MOST_SEEDS + 1):
        if _half_width(n, sd_a, sd_b, sd_diff) < room:
            return n, target
    return None, target


def _one_sided(a: pd.Series, b: pd.Series, paired: bool, shift: float, alternative: str) -> float:
    """scipy's one-sided t test p-value of mean(a) + shift against mean(b) (paired by seed, or Welch's)."""
    a, b = a.dropna().astype(float), b.dropna().astype(float)
    if len(a) < 2 or len(b) < 2:
        return math.nan
    spread = (a.sort_index() - b.sort_index()).std(ddof=1) if paired else a.var(ddof=1) + b.var(ddof=1)
    if spread == 0:  # no spread at all: the difference is exact (as in interval)
        diff = float(a.mean() - b.mean()) + shift
        return 0.0 if (diff > 0 if alternative == "greater" else diff < 0) else 1.0
    if paired:
        return float(stats.ttest_rel(a.sort_index() + shift, b.sort_index(), alternative=alternative).pvalue)
    return float(stats.ttest_ind(a + shift, b, equal_var=False, alternative=alternative).pvalue)


def claim_p(direction: str, a: pd.Series, b: pd.Series, paired: bool, margin: float) -> float:
    """The p-value of the test behind `holds` (below ALPHA exactly when the 90 % interval gives the finding's verdict):
    "worse" rejects difference >= -margin; "not worse" rejects difference <= -margin; "equivalent" rejects
    |difference| >= margin (TOST: the larger of its two one-sided p-values)."""
    not_worse = _one_sided(a, b, paired, margin, "greater")
    if direction == "worse":
        return _one_sided(a, b, paired, margin, "less")
    if direction == "not worse":
        return not_worse
    return max(not_worse, _one_sided(a, b, paired, -margin, "less"))


def holm(p: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given (a missing p counts as 1): the k-th smallest of m is
    multiplied by m - k + 1, and each adjusted value is at least the one before it in that order."""
    values = [1.0 if p_ is None or math.isnan(p_) else float(p_) for p_ in p]
    adjusted, running = [math.nan] * len(values), 0.0
    for k, i in enumerate(sorted(range(len(values)), key=lambda j: values[j])):
        running = max(running, min(1.0, (len(values) - k) * values[i]))
        adjusted[i] = running
    return adjusted


def with_holm(rows: list[dict]) -> list[dict]:
    """Each finding's rows (one scale and numerics) with p_holm and holds_holm: `yes` survives only where the adjusted
    p-value stays below ALPHA; rows that claim nothing (holds n/a) are left out of the family."""
    for finding in {row["finding"] for row in rows}:
        family = [row for row in rows if row["finding"] == finding and row["holds"] not in ("n/a", "diverged")]
        for row, adjusted in zip(family, holm([row["p"] for row in family])):
            row["p_holm"] = adjusted
            row["holds_holm"] = "yes" if adjusted < ALPHA else ("no" if row["holds"] == "no" else "undecided")
    for row in rows:
        row.setdefault("holds_holm", row["holds"])
    return rows


@functools.lru_cache(maxsize=None)
def look(root: Path) -> dict:
    """A runs root's machine.toml [look]: the run folders (patterns) declared before a look at an interval, and those
    added after it; empty when the root has none."""
    try:
        with open(Path(root) / "machine.toml", "rb") as f:
            return tomllib.load(f).get("look", {})
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def looked(path) -> str:
    """'declared' / 'added' (before / after the look, as its runs root's machine.toml says), or '' for a run folder."""
    if not isinstance(path, str | Path):
        return ""
    path = Path(path)
    name, said = f"{path.parent.name}/{path.name}", look(path.parent.parent.resolve())
    for when in ("added", "declared"):
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in said.get(when, [])):
            return when
    return ""


def _tags(side: pd.DataFrame) -> pd.Series:
    return side["path"].map(looked)


def declared_only(a: pd.DataFrame, b: pd.DataFrame, margin: float, measure) -> dict:
    """The after-a-look flag and the interval over the declared runs alone, for a row whose treated runs were declared
    before the look and that holds runs added after it; nothing for any other row. Compared as compare() does
    (oriented: higher is better); the flag's words give the difference in the measure's own direction."""
    tags_a, tags_b = _tags(a), _tags(b)
    if not ((tags_a == "declared").any() and ((tags_a == "added").any() or (tags_b == "added").any())):
        return {}
    a, b = a[tags_a != "added"], b[tags_b != "added"]
    best_a, best_b = oriented(a, measure.column, measure), oriented(b, measure.column, measure)
    got = interval(best_a, best_b, same_seeds(best_a, best_b))
    said = as_measured(got, measure) if not measure.higher_is_better else got
    return dict(after_a_look=f"seeds added after a look: declared {len(a)} vs {len(b)} give "
                             f"{said['difference']:+.{measure.decimals}f} [{said['ci_low']:+.{measure.decimals}f}, "
                             f"{said['ci_high']:+.{measure.decimals}f}]",
                declared_n=len(a), declared_n_against=len(b), declared_difference=got["difference"],
                declared_ci_low=got["ci_low"], declared_ci_high=got["ci_high"],
                declared_verdict=verdict(got["ci_low"], got["ci_high"], margin))


def diverging(findings) -> list:
    """The sides of the findings' comparisons that declare a divergence rule (analysis.entries.Runs.diverged)."""
    return [c.treated for f in findings for c in f.comparisons if c.treated.diverged is not None]


def _completed(df: pd.DataFrame, findings) -> pd.DataFrame:
    """The completed runs of the experiments the findings read, each with its last epoch's top-1 and validation loss
    (RUN_MEASURES) and whether it diverged by its side's rule."""
    read = {e for f in findings for e in f.experiments()}
    # the runs the trainer ended on a non-finite loss are rows too where a finding fails on them: counted, never
    # averaged (a diverged run may have no validation at all)
    failing = {e for f in findings if f.fails_where_diverged for e in f.experiments()}
    ended = df["status"].isin(["completed", "log"]) | (df["status"].eq("diverged") & df["exp"].isin(failing))
    r = df[(df["kind"] == "run") & df["exp"].isin(read) & ended]
    r = r[r["best_val_top1"].notna() | r["exp"].isin(failing)].copy()
    r["diverged"] = r["path"].isin(diverged_runs(df, diverging(findings))) | r["status"].eq("diverged")
    epochs = df[df["kind"] == "epoch"].sort_values("epoch")
    for column, final in RUN_MEASURES.items():  # NaN where no epoch recorded it
        last = epochs.dropna(subset=[column]).groupby("path")[column].last() if column in epochs else {}
        r[final] = r["path"].map(last).astype(float)
    return r


#: an epoch record's column -> the column of a run's last epoch's value (a Measure's final_column may name these)
RUN_MEASURES = {"val_top1": "final_top1", "val_loss": "final_val_loss"}


def oriented(side: pd.DataFrame, column: str, measure) -> pd.Series:
    """A side's values of the measure by seed, turned so that higher is better (negated where lower is)."""
    values = _by_seed(side, column)
    return values if measure.higher_is_better else -values


def as_measured(row: dict, measure) -> dict:
    """A row compared oriented (higher is better) in the measure's own direction: each difference negated, each
    interval's ends negated and swapped (verdicts, holds and p-values read the same either way round)."""
    if measure.higher_is_better:
        return row
    out = dict(row)
    for column in SIGNED:
        if column in row and row[column] is not None:
            out[column] = -row[column]
    for low, high in INTERVALS:
        if low in row and high in row:
            out[low], out[high] = -row[high], -row[low]
    return out


def _by_seed(side: pd.DataFrame, column: str) -> pd.Series:
    return pd.Series(side[column].to_numpy(dtype=float), index=side["seed"].to_numpy())


def _mixed(*sides: pd.DataFrame) -> bool:
    return any("fingerprint" in s and s["fingerprint"].nunique() > 1 for s in sides)


def compare(finding, exp: int, workers: int, against: str, a: pd.DataFrame, b: pd.DataFrame,
            margin: float, thesis_difference: float) -> dict:
    """One row of a finding: its measure (the verdict; the thesis's findings: best top-1) and the measure's final
    epoch (final_*) of `a` minus `b`, 90 % intervals, verdicts; compared so that higher is better, the differences
    returned in the measure's own direction."""
    measure = finding.measure
    row = dict(finding=finding.name, experiment=exp, workers=workers, against=against, n=len(a), n_against=len(b),
               warmup=a["warmup"].iloc[0] if "warmup" in a and len(a) else None,
               optimizer=a["optimizer"].iloc[0] if "optimizer" in a and len(a) else None,
               margin=margin, unit=measure.unit, thesis_difference=thesis_difference)
    best_a, best_b = oriented(a, measure.column, measure), oriented(b, measure.column, measure)
    paired = same_seeds(best_a, best_b)
    best = interval(best_a, best_b, paired)
    if _mixed(a, b):  # refused: runs of different configs are never averaged
        best.update(ci_low=math.nan, ci_high=math.nan, method="configs differ apart from the seed: not compared")
    row.update(difference=best["difference"], ci_low=best["ci_low"], ci_high=best["ci_high"], method=best["method"])
    row["verdict"] = verdict(best["ci_low"], best["ci_high"], margin)
    row["holds"] = holds(finding.holds, best["ci_low"], row["verdict"], margin)
    sd_diff = float((best_a.sort_index() - best_b.sort_index()).std(ddof=1)) if paired else None
    sds = (None, None) if paired else (float(best_a.std(ddof=1)), float(best_b.std(ddof=1)))
    row["seeds_needed"], row["needed_for"] = seeds_needed(best["difference"], *sds, sd_diff, margin)
    row["p"] = claim_p(finding.holds, best_a, best_b, paired, margin) if not _mixed(a, b) else math.nan
    row.update(declared_only(a, b, margin, measure))
    final = interval(oriented(a, measure.final_column, measure), oriented(b, measure.final_column, measure), paired)
    row.update(final_difference=final["difference"], final_ci_low=final["ci_low"], final_ci_high=final["ci_high"],
               final_verdict=verdict(final["ci_low"], final["ci_high"], margin) if not _mixed(a, b)
               else "inconclusive")
    return as_measured(row, measure)


def thesis_top1(ref: pd.DataFrame, exp: int, gpus: int) -> float:
    """The thesis's best top-1 of an experiment at a worker count; where it prints two rows there (Horovod and DDP),
    the Horovod one: the thesis compares the Horovod runs across experiments."""
    rows = ref[(ref["experiment"] == exp) & (ref["gpus"] == gpus)].dropna(subset=["top1"])
    if len(rows) > 1:
        rows = rows[rows["framework"] == "horovod+pytorch"]
    return float(rows["top1"].mean()) if len(rows) else math.nan


def side(runs: pd.DataFrame, of) -> pd.DataFrame:
    """A comparison's side (analysis.entries.Runs): its experiment's runs of its names, at its workers."""
    r = runs[runs["exp"] == of.experiment]
    if of.names:
        r = r[r["run"].str.match(of.names, na=False)]
    if isinstance(of.workers, str) and of.workers != "each" and len(r):
        fewest = r["gpus"].min()
        return r[r["gpus"] == fewest] if of.workers == "fewest" else r[r["gpus"] > fewest]
    return r if isinstance(of.workers, str) else r[r["gpus"] == of.workers]


def comparison_rows(finding, c, runs: pd.DataFrame, ref: pd.DataFrame, margin: float) -> list[tuple]:
    """(row_key, row) of each group of a comparison's treated runs (finding.by) whose control has runs: those of
    the control's side that share the group's finding.match columns."""
    treated, controls = side(runs, c.treated), side(runs, c.control)
    rows = []
    for key, g in treated.groupby(list(finding.by), sort=True):
        first = g.iloc[0]
        control = controls[(controls[list(finding.match)] == first[list(finding.match)]).all(axis=1)] \
            if finding.match else controls
        if control.empty:
            continue
        gpus, base = int(first["gpus"]), int(control["gpus"].iloc[0])
        gone = g["diverged"].astype(bool) if c.treated.diverged else pd.Series(False, index=g.index)
        thesis = thesis_top1(ref, c.treated.experiment, gpus) - thesis_top1(ref, c.control.experiment, base) \
            if finding.measure.column == "best_val_top1" else math.nan  # the thesis printed top-1 alone
        row = compare(finding, c.treated.experiment, gpus, c.against.format(workers=base), g[~gone], control, margin,
                      thesis)
        if c.treated.diverged:  # a side read by a divergence rule: its rows count what it left out
            row.update(optimizer=first.get("optimizer"), warmup=first.get("warmup"), diverged=int(gone.sum()))
        if gone.all():  # nothing left to average: the row says the runs diverged and claims nothing
            row.update(verdict="diverged", holds="diverged", final_verdict="diverged", seeds_needed=None,
                       needed_for=None, method="every run diverged: no interval")
        elif finding.claims_nothing and finding.claims_nothing(g):
            row["holds"] = "n/a"
        if finding.fails_where_diverged and gone.any():  # counted in its Holm family as failing
            row.update(holds="no", p=1.0)
        rows.append((row_key(finding, c.treated.experiment, key), row))
    return rows


def row_key(finding, experiment: int, group) -> tuple:
    """Where a row sorts among its family's: by experiment, then by each of its group's columns (finding.by), the
    optimizers in OPTIMIZERS' order."""
    rank = {name: i for i, name in enumerate(OPTIMIZERS)}
    values = group if isinstance(group, tuple) else (group,)
    return (experiment, *((rank.get(v, len(rank)) if by == "optimizer" else 0, v) for by, v in zip(finding.by, values)))


def margin_of(finding, scale: str, declared: dict) -> float:
    """The finding's margin at a scale: its measure's own where it declares margins (NaN at a scale it declares
    none for), else the scale's margin in points (experiments/scales.toml)."""
    own = finding.measure.margins
    return float((own if own is not None else {k: v.get("points") for k, v in declared.items()}).get(scale, math.nan))


def finding_rows(findings, runs: pd.DataFrame, ref: pd.DataFrame, scale: str, declared: dict) -> list[dict]:
    """Every declared finding's rows at one scale, each family's (Finding.family: consecutive findings of one name)
    in order of experiment and group, the findings of a family in their declared order where those tie."""
    out: list[dict] = []
    families = [[f] for f in findings[:1]]
    for before, f in zip(findings, findings[1:]):
        if f.family and f.family == before.family:
            families[-1].append(f)
        else:
            families.append([f])
    for family in families:
        keyed = [kr for f in family for c in f.comparisons
                 for kr in comparison_rows(f, c, runs, ref, margin_of(f, scale, declared))]
        out += [row for _, row in sorted(keyed, key=lambda kr: kr[0])]
    return out


def orderings(df: pd.DataFrame, ref: pd.DataFrame, findings=()) -> pd.DataFrame:
    """One row per finding, comparison and group of its treated runs at each scale and numerics (module docstring):
    runs in bf16 are compared with bf16 runs, never pooled with fp32 ones."""
    declared = margins()
    rows = []
    runs = _completed(df, findings)
    # smoke runs are compared among themselves only, and get no verdict
    smoke = runs["path"].isin(smoke_paths(df))
    for (scale, numerics, is_smoke), g in runs.groupby([runs["scale"].fillna("unknown"), runs["numerics"], smoke],
                                                       dropna=False, sort=True):
        found = with_holm(finding_rows(tuple(findings), g, ref, scale, declared))
        rows += [{"scale": scale, "numerics": numerics, **(no_verdict(row) if is_smoke else row)} for row in found]
    return pd.DataFrame(rows, columns=COLUMNS)


def no_verdict(row: dict) -> dict:
    """A smoke run's row: its differences stay (a check that the pipeline ran), its verdicts and the thesis's
    difference do not, since 1 seed of 2 epochs decides nothing about a 90-epoch finding."""
    return {**row, "verdict": SMOKE, "holds": SMOKE, "final_verdict": SMOKE, "seeds_needed": None,
            "needed_for": None, "thesis_difference": math.nan, "holds_holm": SMOKE, "p_holm": math.nan,
            "declared_verdict": SMOKE if row.get("after_a_look") else None}


def holds_words(findings) -> str:
    """What supports each finding, by its direction: the findings that hold when worse (and where one claims
    nothing), those that hold when not worse, and the matching ones."""
    worse = [f"{f.name}: worse" + (f", n/a {f.claims_nothing_where}" if f.claims_nothing_where else "")
             for f in findings if f.holds == "worse"]
    ends = {}  # the findings that hold when not worse, by what that asks of the interval in their measure's direction
    for f in findings:
        if f.holds == "not worse":
            end = "low end above -margin" if f.measure.higher_is_better else \
                f"high end below +margin ({f.measure.unit}, lower is better)"
            ends.setdefault(end, []).append(f.name)
    not_worse = [f"{', '.join(names)}: the interval's {end}" for end, names in ends.items()]
    matching = ["the matching findings: equivalent"] if any(f.holds == "equivalent" for f in findings) else []
    return "; ".join(worse + not_worse + matching)


def diverged_words(findings) -> str:
    """'; or, for experiment N, how many of the row's runs diverged (...)' of each experiment and rule, once."""
    rules = dict.fromkeys((s.experiment, s.diverged) for s in diverging(findings))
    failing = {e for f in findings if f.fails_where_diverged for e in f.experiments()}
    return "".join(
        f"; or, for experiment {experiment}, how many of the row's runs diverged ("
        + (rule.declared if math.isinf(rule.share) else f"their last epoch's training loss not finite or above "
           f"{rule.share:g} of their first epoch's: {rule.declared}")
        + "), left out of its mean and counted apart (orderings.csv diverged); "
        + ("a row with any such run fails: holds no, p 1 in its Holm family" if experiment in failing else
           "a row whose runs all diverged has no verdict and claims nothing") for experiment, rule in rules)


def notes(findings=()) -> list[str]:
    declared = margins()
    return [
        "This table is short: every column (seeds_needed, final-epoch verdicts, the thesis's differences, p-values) "
        "is in orderings.csv beside it.",
        "difference: mean best validation top-1 (percent) of the experiment minus the comparison's, with its 90 % t "
        "interval (scipy.stats); method: paired by seed when both sides ran the same seeds, else Welch (unpaired).",
        "verdict: equivalent when the interval lies inside (-margin, margin), worse/better when it lies entirely "
        f"below -margin / above margin, else inconclusive; holds: whether that supports the finding "
        f"({holds_words(findings)}). Each row on its own, not corrected for the number of rows.",
        "holds after Holm: the family-wise view -- Holm's correction over each finding's rows (those that claim "
        "something) of the one-sided tests behind `holds`, at 5 % each, the level each end of a 90 % interval "
        "tests; a row keeps `yes` only where its adjusted p-value (orderings.csv p_holm) stays below 5 %.",
        "flag: a row whose treated runs were declared before a look at an interval and that holds seeds added "
        "after it (the runs' machine.toml [look], as their declared_*.txt record), with the interval over the "
        f"declared seeds alone (orderings.csv declared_*){diverged_words(findings)}.",
    ] + [f"margin at the {scale} scale: {m.get('points')} points -- {m.get('reason', '')}" for scale, m in
         declared.items()] + own_measure_notes(findings)


def own_measure_notes(findings) -> list[str]:
    """A line for each measure a finding declares with its own margins: which findings, what they compare, which
    way is better, the margin at each scale and why."""
    lines, measures = [], []
    for f in findings:  # each measure once, in the findings' order (a Measure holds a dict: not hashable)
        if f.measure.margins is not None and f.measure not in measures:
            measures.append(f.measure)
    for measure in measures:
        names = ", ".join(f.name for f in findings if f.measure == measure)
        better = "higher" if measure.higher_is_better else "lower"
        worse = "below -margin" if measure.higher_is_better else "above +margin"
        margins = "; ".join(f"{m:g} {measure.unit} at the {scale} scale" for scale, m in measure.margins.items())
        lines.append(f"{names}: the difference is in {measure.name}, {better} is better, so worse means an interval "
                     f"wholly {worse}; margin {margins} -- {measure.margin_reason}; none at the other scales (their "
                     "rows: inconclusive).")
    return lines
