"""The thesis's three frameworks side by side in our runs (issue 37): PyTorch's DDP, Horovod+PyTorch,
Horovod+TensorFlow, and TensorFlow's own MultiWorkerMirroredStrategy -- steady-state images/s at each scale, per-GPU
batch and worker count, each as a ratio to PyTorch's and as a speed-up over its own 1-worker run; and the reading of
RQ2 over the three frameworks, computed from that table (never typed)."""
from __future__ import annotations

import math

import pandas as pd

from . import flags as fl
from . import numbers as nb
from . import tables as tb
from .figures import FRAMEWORK_NAME

FRAMEWORKS = ["pytorch", "horovod+pytorch", *tb.TENSORFLOW]
KEYS = ["scale", "exp", "per_gpu_batch", "gpus"]  # one experiment's configuration: runs of two are never averaged


def framework_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per scale, experiment, per-GPU batch and worker count with our fp32 throughput runs (DataParallel left
    out: the thesis's PyTorch is DDP); a column of images/s, its ratio to PyTorch's and its speed-up per framework
    over the same experiment's 1-worker run (experiment 1's where the experiment has none, as the thesis's Table 5)."""
    s = tb.throughput_summary(df)
    s = s[s["framework"].isin(FRAMEWORKS) & (s["backend"] != "dp") & (s["numerics"] == nb.FP32)]
    columns = KEYS + [f"{fw}{suffix}" for fw in FRAMEWORKS for suffix in ("", "_vs_pytorch", "_speedup")] + ["flag"]
    if s.empty:
        return pd.DataFrame(columns=columns)
    s = s.assign(scale=s["scale"].map(tb.scale_label))
    wide = s.pivot_table(index=KEYS, columns="framework", values="steady_images_per_s", aggfunc="mean")
    wide = wide.reindex(columns=FRAMEWORKS)
    disturbed = s.pivot_table(index=KEYS, columns="framework", values="disturbed", aggfunc=tb.joined).reindex(
        index=wide.index, columns=FRAMEWORKS)
    rows = []
    for (scale, exp, batch, gpus), r in wide.iterrows():
        own = (scale, exp, batch, 1) if (scale, exp, batch, 1) in wide.index else (scale, 1, batch, 1)
        row = {"scale": scale, "exp": exp, "per_gpu_batch": batch, "gpus": gpus}
        for fw in FRAMEWORKS:
            base = wide.loc[own, fw] if own in wide.index else math.nan
            row.update({fw: r[fw], f"{fw}_vs_pytorch": nb.speedup(r[fw], r["pytorch"]),
                        f"{fw}_speedup": nb.speedup(r[fw], base)})
        row["flag"] = fl.join(f"{FRAMEWORK_NAME[fw]}: {why}" for fw in FRAMEWORKS for why in
                              (fl.above_ideal(row[f"{fw}_speedup"], gpus), fl.text(disturbed.loc[(scale, exp, batch,
                                                                                                  gpus), fw])) if why)
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def _line(r, spread: float) -> str | None:
    present = [fw for fw in FRAMEWORKS if not math.isnan(r[fw])]
    if len(present) < 2:
        return None

    def words(fw: str) -> str:
        notes = [f"{r[f'{fw}_vs_pytorch']:.2f}x PyTorch's"] if fw != "pytorch" and not math.isnan(
            r[f"{fw}_vs_pytorch"]) else []
        notes += [f"speed-up {r[f'{fw}_speedup']:.2f} over 1 worker"] if r["gpus"] > 1 and not math.isnan(
            r[f"{fw}_speedup"]) else []
        return f"{FRAMEWORK_NAME[fw]} {r[fw]:.0f} images/s" + (f" ({', '.join(notes)})" if notes else "")

    first, second = sorted(present, key=lambda fw: -r[fw])[:2]
    verdict = (f"fastest: {FRAMEWORK_NAME[first]}" if r[first] / r[second] > spread else
               "none ahead by more than the repeats' spread" if not math.isnan(spread) else "none named fastest")
    return (f"- experiment {int(r['exp'])}, {r['scale']}, per-GPU batch {int(r['per_gpu_batch'])}, "
            f"{int(r['gpus'])} worker(s): " + "; ".join(map(words, present)) + f" — {verdict}.")


def frameworks_reading(df: pd.DataFrame) -> str:
    """RQ2 over the three frameworks: where our runs measured two or more of them at one configuration. A framework
    is named fastest only where it leads the next by more than one configuration's repeats differ
    (tables.repeat_spread)."""
    table = framework_table(df)
    spread, repeated = tb.repeat_spread(df)
    noise = (f"The same configuration measured twice ({repeated} configuration(s), equal config fingerprints) "
             f"differed by up to {spread:.2f}x, so a framework is named fastest only where it leads the next by more."
             if repeated else "No configuration was measured twice, so no measurement's noise is known and no "
             "framework is named fastest.")
    lines = ["**Reading, computed from our runs (steady state, images/s).** The thesis compared Horovod+TensorFlow "
             "(tf_cnn_benchmarks) with PyTorch and Horovod+PyTorch (Tables 1-9); here each framework trains the same "
             "model on the same synthetic batches, TensorFlow in processes of its own (`make setup-tf`). " + noise, ""]
    lines += [line for line in (_line(r, spread) for _, r in table.iterrows()) if line] or [
        "- no configuration was measured with two or more frameworks (TensorFlow's rows need `make setup-tf`)."]
    return "\n".join(lines) + "\n"
