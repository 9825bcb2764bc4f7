"""Parsers for the logs the thesis-era tools wrote (and our own train.log, which copies their format).

Three tools, several formats:

* pytorch/examples ``imagenet/main.py`` (and the thesis's Horovod copy of it, juhany/dl-experiments):
  - ``early-2019``: ``Epoch: [0][199/10010]\\tTime 0.581 (0.633)\\tData 0.273 (0.283)\\tLoss 6.9012 (6.9321)\\t
    Acc@1 0.000 (0.102)\\tAcc@5 0.781 (0.512)``, batch index from 0, `` * Acc@1 73.286 Acc@5 91.558``
    (older still: ``Prec@1``/``Prec@5``);
  - ``progressmeter-2019`` (2019-03 refactor): padded fields ``Epoch: [0][  199/10010]\\tTime  0.581 ( 0.633)``,
    ``Loss 6.9012e+00 (6.9321e+00)``, ``Acc@1   0.00 (  0.10)``, index from 0;
  - ``current``: as the refactor but ``progress.display(i + 1)`` (index from 1) and the summary
    `` *   Acc@1 66.667 Acc@5 66.667``.
  Lines may carry ``srun -l`` labels (``0: Epoch: ...``) or Open MPI ``--tag-output`` labels
  (``[1,0]<stdout>:Epoch: ...``); several ranks' lines may be interleaved in one file.
* Horovod's ``examples/pytorch/pytorch_imagenet_resnet50.py``: tqdm bars
  ``Train Epoch     #1:  20%|##   | 2002/10010 [20:51<1:23:26,  1.60it/s, loss=5.43, accuracy=8.12]``.
* tensorflow/benchmarks ``tf_cnn_benchmarks``: ``Step\\tImg/sec\\ttotal_loss``, then
  ``1\\timages/sec: 240.4 +/- 0.0 (jitter = 0.0)\\t7.785`` and ``total images/sec: 1234.56``.

Robustness over cleverness: every parser reads the file as bytes, line by line, with regular expressions in pure
Python, and builds its DataFrame from the matched rows, so a non-UTF-8 byte, a line cut short or two ranks' lines
glued together cost only that line (skipped and counted in ``bad_lines``), and no result depends on the pandas
version's CSV reader.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from contract.runfiles import read_run_file


@dataclass
class ParsedLog:
    """What one upstream log holds, normalised."""

    path: str
    tool: str  # "pytorch-examples" | "horovod-example" | "tf_cnn_benchmarks" | "unknown"
    fmt: str  # "early-2019" | "progressmeter-2019" | "current" | "tqdm" | "tf_cnn_benchmarks" | "unknown"
    #: one row per printed training batch: epoch, batch (0-based), count (= batch+1), total, time, time_avg,
    #: data, data_avg, loss, loss_avg, top1, top1_avg, top5, top5_avg, rank
    train: pd.DataFrame
    #: one row per epoch: epoch, train_loss, train_top1, train_top5, val_loss, val_top1, val_top5, lr, epoch_time
    epochs: pd.DataFrame
    lines: int = 0
    bad_lines: int = 0
    info: dict = field(default_factory=dict)  # tool-specific: total_images_per_s, per_device_batch, ranks...
    # its throughput by the thesis's formulas: numbers.log_throughput(log, ...)


TRAIN_COLUMNS = ["epoch", "batch", "count", "total", "time", "time_avg", "data", "data_avg", "loss", "loss_avg",
                 "top1", "top1_avg", "top5", "top5_avg", "rank"]
EPOCH_COLUMNS = ["epoch", "train_loss", "train_top1", "train_top5", "val_loss", "val_top1", "val_top5", "lr",
                 "epoch_time"]


def _empty(columns) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=float) for c in columns})


def sniff(head: bytes) -> str:
    """Which tool wrote a log, from its first bytes."""
    if b"images/sec:" in head or b"Img/sec" in head:
        return "tf_cnn_benchmarks"
    if _TQDM_RE.search(head):
        return "horovod-example"
    if b"Epoch: [" in head or b"Test: [" in head:
        return "pytorch-examples"
    return "unknown"


def parse_log(path: str | Path, raw: bytes | None = None) -> ParsedLog:
    """Parse one upstream log file (any of the formats above), plain or gzip'd (a committed run's train.log.gz, by
    either name: contract/runfiles.py). Never raises on bad content."""
    path = str(path)
    if raw is None:
        raw = read_run_file(path)
    tool = sniff(raw[:1 << 20])
    if tool == "unknown" and len(raw) > 1 << 20:
        tool = sniff(raw)
    parser = {"pytorch-examples": parse_pytorch_examples, "horovod-example": parse_horovod_example,
              "tf_cnn_benchmarks": parse_tf_cnn_benchmarks}.get(tool)
    if parser:
        return parser(raw, path)
    n = raw.count(b"\n") + (0 if raw.endswith(b"\n") or not raw else 1)
    return ParsedLog(path, "unknown", "unknown", _empty(TRAIN_COLUMNS), _empty(EPOCH_COLUMNS), lines=n,
                     bad_lines=0, info={"note": "no known log format recognised"})


_TRAIN_MARK = b"Epoch: ["
_NUM = rb"([-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|inf))"
# One training line of any historical format (padded or not, Acc or Prec); the loss may be any token (nan, a
# garbled value): the row is kept with a NaN loss, as the loss is not needed for throughput or accuracy.
_TRAIN_RE = re.compile(
    rb"Epoch: \[ *(\d+)\]\[ *(\d+)/ *(\d+)\]\s+Time +" + _NUM + rb" \( *" + _NUM + rb"\)\s+Data +" + _NUM
    + rb" \( *" + _NUM + rb"\)\s+Loss +(\S+) \( *([^\s)]+)\)\s+(?:Acc|Prec)@1 +" + _NUM + rb" \( *" + _NUM
    + rb"\)\s+(?:Acc|Prec)@5 +" + _NUM + rb" \( *" + _NUM + rb"\)\s*$")
_TRAIN_NAMES = ["epoch", "idx", "total", "time", "time_avg", "data", "data_avg", "loss", "loss_avg",
                "top1", "top1_avg", "top5", "top5_avg", "rank"]
# srun -l label ("0: ", " 12: ") or Open MPI --tag-output label ("[1,0]<stdout>:")
_PREFIX_RE = re.compile(rb"^\s*(?:(\d+):\s?|\[\d+,(\d+)\]<std(?:out|err)>:)")
_TEST_RE = re.compile(
    rb"Test: \[ *(\d+)/(\d+)\]\tTime +([\d.]+) \( *([\d.]+)\)\tLoss +(\S+) \( *([^\s)]+)\)\t"
    rb"(?:Acc|Prec)@1 +([\d.]+) \( *([\d.]+)\)\t(?:Acc|Prec)@5 +([\d.]+) \( *([\d.]+)\)\s*$")
_SUMMARY_RE = re.compile(rb"^ ?\*( +)(?:Acc|Prec)@1 ([\d.]+) (?:Acc|Prec)@5 ([\d.]+)\s*$")
_LR_RE = re.compile(rb"Setting learning rate for epoch (\d+) to ([-+\d.eE]+|nan|inf)")
_E_LOSS_RE = re.compile(rb"Loss +[-\d.]+e[-+]\d+")


def _split_prefix(line: bytes) -> tuple[int, bytes]:
    """(rank or -1, line without its srun/mpirun label)."""
    m = _PREFIX_RE.match(line)
    if not m:
        return -1, line
    rank = m.group(1) if m.group(1) is not None else m.group(2)
    return int(rank), line[m.end():]


def _numbers(tokens: tuple[bytes, ...]) -> np.ndarray:
    """Byte-string tokens -> floats; a garbled token (only the loss may be one) becomes NaN."""
    try:
        return np.fromiter(map(float, tokens), dtype=np.float64, count=len(tokens))
    except ValueError:
        return np.array([_number(t) for t in tokens], dtype=np.float64)


def _number(token: bytes) -> float:
    try:
        return float(token)
    except ValueError:
        return math.nan


def _train_frame(groups: list[tuple], ranks: list[int]) -> pd.DataFrame:
    """The matched training lines' fields as a DataFrame, one column at a time (no CSV reader)."""
    if not groups:
        return _empty(_TRAIN_NAMES)
    columns = {name: _numbers(tokens) for name, tokens in zip(_TRAIN_NAMES[:-1], zip(*groups))}
    for name in ("epoch", "idx", "total"):
        columns[name] = columns[name].astype(np.int64)
    columns["rank"] = np.array(ranks, dtype=np.int64)
    return pd.DataFrame(columns)


def _split_lines(raw: bytes) -> list[bytes]:
    if b"\r" in raw:
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    lines = raw.split(b"\n")
    if lines and not lines[-1]:  # the file ends with a newline
        lines.pop()
    return lines


def parse_pytorch_examples(raw: bytes, path: str = "<memory>") -> ParsedLog:
    """Parse a pytorch/examples imagenet log (any of its historical formats).

    Pure Python, one line at a time, on bytes: a bad byte, a cut-short line or two ranks' lines glued together
    cost that line only (counted in bad_lines), and the result does not depend on the pandas version.
    """
    lines = _split_lines(raw)
    groups, row_ranks, rare, bad = _scan(lines)
    train = _train_frame(groups, row_ranks)
    ranks = sorted(int(r) for r in train["rank"].unique()) if len(train) else []
    train = _one_rank(train, ranks)
    fmt, base = _format_and_base(lines, rare, train)
    train = train.assign(batch=train["idx"] - base)
    train = train.assign(count=train["batch"] + 1).sort_values(["epoch", "batch"], kind="stable")
    train = train[TRAIN_COLUMNS].reset_index(drop=True)
    # -- rare lines: validation, summaries, learning rates; attach each to the epoch trained just before it
    epochs = _pytorch_epochs(train, rare)
    bad += sum(1 for _, _, body in rare if body.startswith(b"Test: [") and not _TEST_RE.match(body))
    info = {"ranks": [r for r in ranks if r >= 0], "format": fmt}
    return ParsedLog(path, "pytorch-examples", fmt, train, epochs, lines=len(lines), bad_lines=int(bad), info=info)


def _scan(lines: list[bytes]) -> tuple[list[tuple], list[int], list[tuple[int | None, int, bytes]], int]:
    """(training lines' fields, their ranks, the rare lines as (epoch trained just before, rank, line), bad lines)."""
    groups: list[tuple] = []
    row_ranks: list[int] = []
    rare: list[tuple[int | None, int, bytes]] = []
    bad, last_epoch = 0, None
    for line in lines:
        if _TRAIN_MARK not in line and b"Test: [" not in line and b"*" not in line and b"learning rate" not in line:
            continue
        rank, body = _split_prefix(line)
        if _TRAIN_MARK in body:
            # a second record on the line: two ranks' output glued together; no match: cut short or garbled
            m = _TRAIN_RE.match(body) if body.count(_TRAIN_MARK) == 1 else None
            if m is None:
                bad += 1
                continue
            groups.append(m.groups())
            row_ranks.append(rank)
            last_epoch = int(m.group(1))
        else:
            rare.append((last_epoch, rank, body))
    return groups, row_ranks, rare, bad


def _one_rank(train: pd.DataFrame, ranks: list[int]) -> pd.DataFrame:
    """One rank's view: rank 0 (or the lowest label); unlabelled interleaved ranks: the first line of each batch."""
    if not len(train):
        return train
    labelled = [r for r in ranks if r >= 0]
    if labelled:
        train = train[train["rank"] == labelled[0]]
    key = train["epoch"].to_numpy(dtype=np.int64) * 10**9 + train["idx"].to_numpy(dtype=np.int64)
    if not (np.diff(key) > 0).all():  # interleaved ranks or repeated lines: keep the first of each batch
        train = train.drop_duplicates(["epoch", "idx"], keep="first")
    return train


def _format_and_base(lines: list[bytes], rare: list, train: pd.DataFrame) -> tuple[str, int]:
    """The log's historical format and whether it counts batches from 0 or 1."""
    sample = [ln for ln in lines[:400] if _TRAIN_MARK in ln][:50]
    summary_spaces = [len(m.group(1)) for _, _, body in rare if (m := _SUMMARY_RE.match(body))]
    progressmeter = any(_E_LOSS_RE.search(ln) or b"( " in ln for ln in sample)
    fmt = "progressmeter-2019" if progressmeter else "early-2019"
    base = 0
    if len(train):
        if (train["idx"] == train["total"]).any():
            base = 1  # '[10010/10010]' only exists when counting from 1
        elif progressmeter and not (train["idx"] == 0).any():
            firsts = train.groupby("epoch")["idx"].min()
            base = 1 if (firsts == 1).all() else 0
    if summary_spaces and max(summary_spaces) >= 3 and not (len(train) and (train["idx"] == 0).any()):
        base = 1  # ' *   Acc@1' is today's display_summary
    return ("current" if base == 1 else fmt), base


def _pytorch_epochs(train: pd.DataFrame, rare: list) -> pd.DataFrame:
    """Per-epoch rows: the last training line's running means, validation from Test/summary lines, lr notes."""
    rows: dict[int, dict] = {}
    if len(train):
        last = train.groupby("epoch").tail(1).set_index("epoch")
        for e, r in last.iterrows():
            rows[int(e)] = {"epoch": int(e), "train_loss": r["loss_avg"], "train_top1": r["top1_avg"],
                            "train_top5": r["top5_avg"], "epoch_time": r["time_avg"] * r["count"]}
    labelled = [rk for _, rk, _ in rare if rk >= 0]
    keep_rank = min(labelled) if labelled else None
    val_time: dict[int, float] = {}
    for e, rank, body in rare:
        if keep_rank is not None and rank >= 0 and rank != keep_rank:
            continue
        if (m := _LR_RE.search(body)):
            le = int(m.group(1))
            rows.setdefault(le, {"epoch": le})
            rows[le].setdefault("lr", float(m.group(2)))
            continue
        e = -1 if e is None else e  # validation before any training (--evaluate)
        if (m := _TEST_RE.match(body)):
            row = rows.setdefault(e, {"epoch": e})
            if row.get("_val_done"):
                continue
            row["val_loss"] = float(m.group(6))
            val_time[e] = float(m.group(4)) * (int(m.group(1)) + 1)
        elif (m := _SUMMARY_RE.match(body)):
            row = rows.setdefault(e, {"epoch": e})
            if not row.get("_val_done"):  # several ranks printing the same summary: keep the first
                row["val_top1"] = float(m.group(2))
                row["val_top5"] = float(m.group(3))
                row["_val_done"] = True
    for e, t in val_time.items():
        if e in rows and "epoch_time" in rows[e]:
            rows[e]["epoch_time"] = rows[e]["epoch_time"] + t
    if not rows:
        return _empty(EPOCH_COLUMNS)
    df = pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows.values()])
    return df.reindex(columns=EPOCH_COLUMNS).sort_values("epoch").reset_index(drop=True)


_TQDM_RE = re.compile(
    rb"(Train|Validate) Epoch +#(\d+): +(\d+)%\|[^|\r\n]*\| *(\d+)/(\d+) \[([\d:]+)<([\d:?]+), +"
    rb"([\d.?]+)(s/it|it/s)(?:, *loss=([^,\]\s]+))?(?:, *accuracy=([^,\]\s]+))?\]")


def _clock_s(text: bytes) -> float:
    parts = [float(p) for p in text.split(b":")]
    s = 0.0
    for p in parts:
        s = s * 60 + p
    return s


def parse_horovod_example(raw: bytes, path: str = "<memory>") -> ParsedLog:
    """Parse Horovod's pytorch_imagenet_resnet50.py output (tqdm bars, '\\r'-separated updates)."""
    text = raw.replace(b"\r", b"\n")
    segments = [s for s in text.split(b"\n") if s.strip()]
    n_lines = len(segments)
    recs, bad = [], 0
    for seg in segments:
        if b"Epoch" not in seg or b"#" not in seg:
            continue
        m = _TQDM_RE.search(seg)
        if not m:
            bad += 1
            continue
        rate = float(m.group(8)) if m.group(8) not in (b"?",) else math.nan
        if m.group(9) == b"s/it" and rate:
            rate = 1.0 / rate
        recs.append({"phase": m.group(1).decode(), "epoch": int(m.group(2)) - 1, "n": int(m.group(4)),
                     "total": int(m.group(5)), "elapsed": _clock_s(m.group(6)), "rate": rate,
                     "loss": float(m.group(10)) if m.group(10) else math.nan,
                     "accuracy": float(m.group(11)) if m.group(11) else math.nan})
    df = pd.DataFrame(recs)
    if df.empty:
        return ParsedLog(path, "horovod-example", "tqdm", _empty(TRAIN_COLUMNS), _empty(EPOCH_COLUMNS),
                         lines=n_lines, bad_lines=bad)
    tr = df[df["phase"] == "Train"].drop_duplicates(["epoch", "n"], keep="last")
    # tqdm prints elapsed time; the running-mean batch time at n batches is elapsed / n
    train = pd.DataFrame({
        "epoch": tr["epoch"], "batch": tr["n"] - 1, "count": tr["n"], "total": tr["total"],
        "time": np.nan, "time_avg": tr["elapsed"] / tr["n"].where(tr["n"] > 0), "data": np.nan, "data_avg": np.nan,
        "loss": np.nan, "loss_avg": tr["loss"], "top1": np.nan, "top1_avg": tr["accuracy"], "top5": np.nan,
        "top5_avg": np.nan, "rank": -1})
    train = train[train["count"] > 0].reset_index(drop=True)
    rows = {}
    for e, g in df.groupby("epoch"):
        t = g[g["phase"] == "Train"]
        v = g[g["phase"] == "Validate"]
        row = {"epoch": int(e)}
        if len(t):
            last = t.iloc[-1]
            row.update(train_loss=last["loss"], train_top1=last["accuracy"], epoch_time=last["elapsed"])
        if len(v):
            last = v.iloc[-1]
            row.update(val_loss=last["loss"], val_top1=last["accuracy"])
            row["epoch_time"] = row.get("epoch_time", 0.0) + last["elapsed"]
        rows[int(e)] = row
    epochs = pd.DataFrame(list(rows.values())).reindex(columns=EPOCH_COLUMNS)
    return ParsedLog(path, "horovod-example", "tqdm", train[TRAIN_COLUMNS], epochs,
                     lines=n_lines, bad_lines=bad)


_TF_STEP_RE = re.compile(
    rb"^(?:\[\d+,(\d+)\]<stdout>:)?(\d+)\timages/sec: ([\d.]+)(?: \+/- ([\d.]+) \(jitter = ([\d.]+)\))?"
    rb"\t([-+\d.eE]+|nan|inf)(?:\t([\d.]+)\t([\d.]+))?\s*$", re.M)
_TF_TOTAL_RE = re.compile(rb"^(?:\[\d+,(\d+)\]<stdout>:)?total images/sec: ([\d.]+)\s*$", re.M)
_TF_PER_DEVICE_RE = re.compile(rb"^(?:\[\d+,(\d+)\]<stdout>:)?\s*([\d.]+) per device\s*$", re.M)
_TF_STEP_CANDIDATE = re.compile(rb"^(?:\[\d+,\d+\]<stdout>:)?\d+\timages/sec", re.M)


def parse_tf_cnn_benchmarks(raw: bytes, path: str = "<memory>") -> ParsedLog:
    """Parse tf_cnn_benchmarks output: per-step running images/s and the final total."""
    raw = raw.replace(b"\r\n", b"\n")
    n_lines = raw.count(b"\n") + (0 if raw.endswith(b"\n") or not raw else 1)
    steps = [(int(r) if r else -1, int(s), float(ips), float(u) if u else math.nan, float(loss))
             for r, s, ips, u, _, loss, _, _ in _TF_STEP_RE.findall(raw)]
    candidates = len(_TF_STEP_CANDIDATE.findall(raw))
    totals = [(int(r) if r else -1, float(v)) for r, v in _TF_TOTAL_RE.findall(raw)]
    bad = max(0, candidates - len(steps)) + max(0, raw.count(b"total images/sec") - len(totals))
    per_device = [float(v) for _, v in _TF_PER_DEVICE_RE.findall(raw)]
    df = pd.DataFrame(steps, columns=["rank", "step", "images_per_s", "uncertainty", "loss"])
    ranks = sorted(int(r) for r in df["rank"].unique()) if len(df) else []
    if len(df):
        keep = min(ranks)
        df = df[df["rank"] == keep].drop_duplicates("step", keep="first")
    # the lowest labelled rank's total, else the first printed
    total = min(((r, v) for r, v in totals if r >= 0), default=totals[0])[1] if totals else None
    train = pd.DataFrame({"epoch": 0, "batch": df["step"] - 1, "count": df["step"], "total": np.nan,
                          "time": np.nan, "time_avg": np.nan, "data": np.nan, "data_avg": np.nan,
                          "loss": df["loss"], "loss_avg": np.nan, "top1": np.nan, "top1_avg": np.nan,
                          "top5": np.nan, "top5_avg": np.nan, "rank": df["rank"]})
    info = {"total_images_per_s": total, "per_device_batch": per_device[0] if per_device else None,
            "last_step_images_per_s": float(df["images_per_s"].iloc[-1]) if len(df) else None,
            "ranks": [r for r in ranks if r >= 0]}
    return ParsedLog(path, "tf_cnn_benchmarks", "tf_cnn_benchmarks", train[TRAIN_COLUMNS].reset_index(drop=True),
                     _empty(EPOCH_COLUMNS), lines=n_lines, bad_lines=int(bad), info=info)
