"""Experiment 3 against the link's rate (RQ2 where communication costs): make link-sweep's runs, each across the
local cluster's hosts with every host's link limited by tc (its manifest's `link`), one table and one figure.

The runs come from runs.load_study's frame: a limited run's bench rows are LINK_BENCH rows (never averaged into the
standard throughput tables), and the sweep's unlimited runs (`none`: tc lifts the limit, the manifest names no link)
are its ordinary bench rows of the same config fingerprint, drawn here as "unlimited". The report's entries
(analysis/catalogue.py) and tools/link_sweep.py's own link_sweep.md both draw with link_table and link_figure.
"""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from contract.config import ConfigError  # noqa: E402
from contract.runfolder import link_bits_per_s  # noqa: E402

from . import flags as fl  # noqa: E402
from .runs import LINK_BENCH  # noqa: E402

UNLIMITED = "unlimited"
#: what makes one measurement, beside the link: the throughput tables' configuration keys (tables.CONFIG_KEYS)
KEYS = ["exp", "framework", "backend", "numerics", "per_gpu_batch", "gpus", "processes", "scale"]
COLUMNS = KEYS + ["link", "link_mbit_s", "hosts", "images_per_s", "speedup", "comm_share", "n_runs", "runs", "flag"]
SHOWN = ["backend", "processes", "hosts", "link", "images_per_s", "speedup", "comm_share", "n_runs", "flag"]
NOTES = ("images_per_s: steady-state images/s (after the warm-up batches), the mean over the configuration's runs at "
         "that link; speedup: over the same backend's 1-process run at the same link (empty without one); "
         "comm_share: the share of the timed steps spent communicating (the bench record's comm_s over data, "
         "compute and communication); hosts: the distinct hosts the ranks ran on; flag: a speed-up above its processes, "
         "or a run whose timed steps did not have their CPUs alone (docs/training.md), with the reason.",
         "unlimited: the sweep's `none`, each host's link as the local cluster made it (veth pairs on one machine's "
         "cores, so every host shares the same CPUs: the numbers are this machine's, not a network's).")


def link_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The bench rows of runs under a limited link, and of unlimited runs of the same config fingerprints."""
    limited = df[df["kind"] == LINK_BENCH]
    if limited.empty:
        return limited
    limited_configs = {fp.removesuffix(f" (link {link})") for fp, link in zip(limited["fingerprint"], limited["link"])}
    unlimited = df[(df["kind"] == "bench") & df["link"].isna() & df["fingerprint"].isin(limited_configs)]
    return pd.concat([limited, unlimited.assign(link=UNLIMITED)], ignore_index=True)


def mbit_s(link: str) -> float:
    """The link's rate in Mbit/s: inf where unlimited, NaN where the manifest's rate is not tc's."""
    if link == UNLIMITED:
        return math.inf
    try:
        return link_bits_per_s(link) / 1e6
    except ConfigError:
        return math.nan


def link_table(df: pd.DataFrame) -> pd.DataFrame:
    """A row per configuration (KEYS) and link rate, slowest link first, unlimited last (empty: no link runs)."""
    rows = link_rows(df)
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    timed = rows["data_s"] + rows["compute_s"] + rows["comm_s"]
    rows = rows.assign(comm_share=rows["comm_s"] / timed.where(timed > 0), scale=rows["scale"].fillna("unknown"))
    g = rows.groupby(KEYS + ["link"], dropna=False)
    out = g.agg(hosts=("hosts", "max"), images_per_s=("steady_images_per_s", "mean"),
                comm_share=("comm_share", "mean"), n_runs=("run", "nunique"),
                runs=("run", lambda r: ", ".join(sorted(set(r)))),
                disturbed=("disturbed", lambda d: fl.join(map(fl.text, d)))).reset_index()
    out["link_mbit_s"] = out["link"].map(mbit_s)
    out["hosts"] = out["hosts"].astype("Int64")
    out["speedup"] = out["images_per_s"] / one_process(out)
    out["flag"] = [fl.join([fl.above_ideal(sp, p), d]) for sp, p, d in zip(out["speedup"], out["processes"],
                                                                          out["disturbed"])]
    return out.sort_values(["backend", "processes", "link_mbit_s"], kind="stable", na_position="last")[COLUMNS] \
        .reset_index(drop=True)


def one_process(table: pd.DataFrame) -> pd.Series:
    """Each row's baseline: the images/s of the 1-process row of its backend, numerics, batch and scale at its link
    (NaN where none ran)."""
    same = ["exp", "framework", "backend", "numerics", "per_gpu_batch", "scale", "link"]
    ones = table[table["processes"] == 1].drop_duplicates(same)[same + ["images_per_s"]]
    return table[same].merge(ones, on=same, how="left")["images_per_s"].set_axis(table.index)


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """The table as its markdown shows it."""
    return table[SHOWN]


def link_figure(table: pd.DataFrame, title: str):
    """Images/s against the link's rate, log x, a line per backend and processes; unlimited drawn a decade past the
    fastest limited rate, its tick labelled so."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    finite = table.loc[table["link_mbit_s"].between(0, math.inf, inclusive="neither"), "link_mbit_s"]
    unlimited_at = 10 * finite.max() if len(finite) else 1000.0
    drawn = table[table["link_mbit_s"].notna()].assign(
        x=lambda t: t["link_mbit_s"].where(t["link_mbit_s"] < math.inf, unlimited_at))
    for (backend, processes), g in drawn.groupby(["backend", "processes"], sort=True):
        ax.plot(g["x"], g["images_per_s"], marker="o", label=f"{backend}, {int(processes)} process"
                + ("es" if processes != 1 else ""))
    ax.set_xscale("log")
    ticks = sorted(set(drawn["x"]))
    ax.set_xticks(ticks, [UNLIMITED if x == unlimited_at and (drawn["link_mbit_s"] == math.inf).any() else f"{x:g}"
                          for x in ticks])
    ax.minorticks_off()
    ax.set_xlabel("each host's link (Mbit/s)")
    ax.set_ylabel("images/s (steady state)")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig
