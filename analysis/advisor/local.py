"""The advisor against experiment 3 on the local cluster at several link rates (issue #51): the rows of
results/tables/advisor_validation.md beside the thesis's, kept in results/tables/advisor_local.csv so that `make
advise` renders the committed table again without the (uncommitted) runs, and its figure. `python -m tools
advisor-local` (make advise-local) probes each rate's link, times the steps and writes all three.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from contract import reader  # noqa: E402

from . import model as advisor, runs as advisor_runs  # noqa: E402
from .model import predicted_rows, summary  # noqa: E402, F401 -- the table's, here too
from ..link import mbit_s  # noqa: E402
from ..runs import load_study  # noqa: E402

LOCAL_CSV = Path(__file__).resolve().parents[2] / "results" / "tables" / "advisor_local.csv"
FIGURE = "advisor_validation"
FIELDS = ["source", "framework", "gpus", "nodes", "predicted", "measured", "error", "holds", "bound", "exposed_ms",
          "why", "run", "started"]
FRAMEWORK = {"ddp": "pytorch", "horovod": "horovod+pytorch"}


def started_of(path: str) -> str:
    """The run's start (its manifest), so a test can hold every local row to after the declaration."""
    return str((reader.read_manifest(path) or {}).get("start") or "")


def local_rows(sweep: Path, steps: Path = advisor_runs.STEPS, check_root: Path = advisor.CHECK_ROOT,
               tolerance: float | None = None) -> list[dict]:
    """The sweep's experiment-3 runs beside their predictions (runs with no prediction keep the reason in `why`)."""
    tolerance = advisor.declaration()["tolerance"] if tolerance is None else tolerance
    table = advisor_runs.prediction_table(load_study(sweep), steps, check_root, tolerance)
    rows = []
    for r in table.itertuples():
        predicted = not pd.isna(r.predicted)
        rows.append({"source": f"local cluster, link {r.link}", "framework": FRAMEWORK.get(r.backend, r.backend),
                     "gpus": int(r.processes), "nodes": int(r.hosts) if not pd.isna(r.hosts) else "",
                     "predicted": r.predicted, "measured": r.measured, "error": r.error if predicted else math.nan,
                     "holds": bool(predicted and abs(r.error) <= tolerance), "bound": r.bound or "",
                     "exposed_ms": r.exposed_ms, "why": r.cause, "run": r.run, "started": started_of(r.path)})
    return sorted(rows, key=lambda x: (rate_order(x["source"]), x["framework"], x["gpus"], x["run"]))


def rate_order(source: str) -> float:
    """The slowest link first, unlimited last."""
    rate = source.rsplit(" ", 1)[-1]
    value = mbit_s(rate)
    return math.inf if math.isnan(value) else value


def write_local_rows(rows: list[dict], path: Path = LOCAL_CSV) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{r[k]:.6g}" if isinstance(r[k], float) and not math.isnan(r[k]) else
                            "" if isinstance(r[k], float) else r[k]) for k in FIELDS})
    return path


def read_local_rows(path: Path = LOCAL_CSV) -> list[dict]:
    """The committed local rows ([] before the local validation has run)."""
    if not Path(path).exists():
        return []
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            number = {k: float(r[k]) if r[k] else math.nan for k in ("predicted", "measured", "error", "exposed_ms")}
            rows.append({**r, **number, "gpus": int(r["gpus"]), "holds": r["holds"] == "True"})
    return rows


def validation_figure(thesis: list[dict], local: list[dict], tolerance: float, title: str):
    """Predicted against measured images/s (log-log): the line of a perfect prediction, the tolerance shaded, the
    thesis's rows and each link rate's local rows."""
    fig, ax = plt.subplots(figsize=(6.5, 5))
    groups = [("thesis Tables 8-9", thesis)] + [(s, [r for r in local if r["source"] == s])
                                                for s in dict.fromkeys(r["source"] for r in local)]
    values = [v for _, rows in groups for r in rows for v in (r["predicted"], r["measured"])]
    low, high = min(values) / 1.5, max(values) * 1.5
    line = [low, high]
    ax.plot(line, line, color="black", linewidth=0.8, label="predicted = measured")
    ax.fill_between(line, [v * (1 - tolerance) for v in line], [v * (1 + tolerance) for v in line],
                    color="grey", alpha=0.2, label=f"within {100 * tolerance:.0f} %")
    for label, rows in groups:
        ax.scatter([r["measured"] for r in rows], [r["predicted"] for r in rows], label=label, s=22)
    ax.set(xscale="log", yscale="log", xlim=line, ylim=line, xlabel="measured images/s",
           ylabel="predicted images/s", title=title)
    for axis in (ax.xaxis, ax.yaxis):  # decades labelled, not every minor tick (they overlap on a log axis)
        axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig
