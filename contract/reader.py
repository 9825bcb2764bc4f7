"""The run folder's one reader (contract/runfolder.py holds its schema and its one writer).

`read_runs(root)` turns a tree of run folders into one DataFrame; the analysis reads run folders through nothing
else. The small readers it is built from serve those who need one file of one folder (the study runner, a resuming
trainer, the tools): `read_config`, `read_manifest`, `read_metrics` (and `last_record`, the newest record of a kind,
for progress lines) and `folder_fingerprint`. Nothing here renames a field or derives a number: the analysis does
that, on the DataFrame (analysis/runs.py). Nothing here raises on bad content either: a missing or unreadable
file, or a line that is not a record, is a problem the DataFrame lists; a folder whose manifest is of another
version (read_manifest raises, naming the migration), or whose config.json was changed after the run (its
fingerprint is not the one the manifest recorded: `config_changed`), is left out of a tree with that line
(`left_out`), so one bad folder never takes a report down nor counts as another config's run.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import workloads
from contract import machine, placement
from contract.fingerprint import document_fingerprint
from contract.invariants import check_run
from contract.manifest import ManifestError, check_version
from contract.runfiles import holding, open_run_file, read_run_file, run_file_exists, two_forms
from contract.runfolder import CHECKPOINT, CONFIG, MANIFEST, METRICS, RECORDS, STATUSES, parse_lines, parse_record

if TYPE_CHECKING:
    import pandas as pd

#: the columns every row has: where it comes from, and which row it is
IDENTITY = ["experiment", "run", "path", "kind"]
#: the columns of a folder's row (kind "run"); None in the rows of its records
FOLDER = ["config", "manifest", "fingerprint", "bad_lines", "problems", "left_out"]
#: the columns of the records' rows: `time`, then every field the schema declares (contract/runfolder.py)
RECORD = list(dict.fromkeys(["time"] + [f.name for cls in RECORDS.values() for f in fields(cls)]))


# ================================================================================================================
# One folder, one file
# ================================================================================================================
def read_document(path: str | Path) -> tuple[dict | None, str | None]:
    """A JSON object file (config.json, manifest.json) and the problem with it: (the object, None) or (None,
    "missing" / "not an object" / "unreadable (ErrorType)")."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None, "missing"
    except (OSError, ValueError) as exc:
        return None, f"unreadable ({type(exc).__name__})"
    return (data, None) if isinstance(data, dict) else (None, "not an object")


def read_config(run_dir: str | Path) -> dict | None:
    """A run folder's config.json (the resolved config), or None when it has no readable one."""
    return read_document(Path(run_dir) / CONFIG)[0]


def is_token_run(run_dir: str | Path) -> bool:
    """The run's config names a language model: is_token_config of its config.json."""
    return is_token_config(read_config(run_dir) or {})


def is_token_config(config: dict) -> bool:
    """A config (config.json's) names a language model (a plug-in declares the tokens a sample holds, workloads/):
    its runs' results are read in tokens/s and validation loss, not images/s and top-1."""
    return workloads.has_tokens(_section(config, "model").get("name"))


def read_manifest(run_dir: str | Path) -> dict | None:
    """A run folder's manifest.json (contract/manifest.py), or None when it has no readable one."""
    return read_manifest_document(run_dir)[0]


def read_manifest_document(run_dir: str | Path) -> tuple[dict | None, str | None]:
    """A run folder's manifest.json and the problem with it, as read_document; one of an older version raises
    ManifestError, naming the command that migrates it."""
    path = Path(run_dir) / MANIFEST
    manifest, problem = read_document(path)
    check_version(manifest, path)
    return manifest, problem


def folder_fingerprint(run_dir: str | Path) -> str | None:
    """The fingerprint of a run folder's config.json (contract/fingerprint.py); None when it has no readable one."""
    config = read_config(run_dir)
    return None if config is None else document_fingerprint(config)


#: what a run is, declared once: two folders of one identity hold one run, whatever their names (a `cp -a` copy, the
#: same config and seed trained under `--run a` and `--run b`); the folder's and the run's names are no part of it.
#: Beside the config's fingerprint, how it ran: the backend and framework it resolved to (train.backend = "auto"
#: leaves them to the launcher), its processes (the node scale's P), the nodes they started on (nodes_of) and the link
#: it ran over (make link-sweep); and the machine it ran on (contract/machine.py)
RUN_IDENTITY = ("experiment", "fingerprint", "backend", "framework", "processes", "nodes", "link", "seed", "scale",
                "machine")
IDENTITY_WORDS = "experiment, config fingerprint, backend, processes, nodes, link, seed, scale and machine"  # messages


def run_identity(run_dir: str | Path) -> tuple | None:
    """A run folder's identity (RUN_IDENTITY's values) from its config.json and manifest.json; None without a
    readable config.json (identity_problem says why)."""
    config = read_config(run_dir)
    return None if config is None else identity_of(config, read_manifest(run_dir))


def identity_of(config: dict, manifest: dict | None) -> tuple:
    """RUN_IDENTITY's values from a run's two documents."""
    train, resolved = _section(config, "train"), _section(config, "resolved")
    manifest = manifest if isinstance(manifest, dict) else {}
    return (config.get("experiment"), document_fingerprint(config), resolved.get("backend"),
            resolved.get("framework"), manifest.get("world_size"), nodes_of(manifest), manifest.get("link"),
            train.get("seed"), config.get("scale"), machine.key(manifest))


def nodes_of(manifest: dict) -> int | None:
    """The nodes a run's ranks were started on (contract/placement.py nodes), None where its manifest does not say.
    Part of its identity: the config does not name how its processes were placed, so 4 processes on one node and 2
    nodes of 2 share a fingerprint, yet are two measurements of throughput (experiment 14 runs both)."""
    ranks = manifest.get("placement")
    count = placement.nodes(ranks if isinstance(ranks, list) else None)
    return int(count) if count == count else None  # NaN (unrecorded) -> None: NaN never equals itself


def _section(document: dict, name: str) -> dict:
    value = document.get(name)
    return value if isinstance(value, dict) else {}


def identity_problem(run_dir: str | Path) -> str | None:
    """Why a run folder that holds a run has no identity (its config.json: missing, unreadable, not an object), or
    None: it has one, or it holds nothing yet. A run's identity (RUN_IDENTITY) is read from its config.json and
    manifest, never from its folder's name; without a config.json it cannot count for any plan."""
    run_dir = Path(run_dir)
    problem = read_document(run_dir / CONFIG)[1]
    # it holds a run where it holds what could count or be resumed: a config.json (even unreadable), records, a
    # checkpoint, or a manifest's status; a manifest without one and nothing else (a trainer killed as it started)
    # holds no run: it is started afresh, whatever its config
    if problem and (any(run_file_exists(run_dir / name) for name in (CONFIG, METRICS, CHECKPOINT))
                    or (read_manifest(run_dir) or {}).get("status") in STATUSES):
        return f"{CONFIG} is {problem}"
    return None


#: the statuses of a run that ended with a result: a study skips such a run instead of training it again
FINISHED = ("completed", "diverged")


def config_changed(config: dict | None, manifest: dict | None) -> str | None:
    """Why config.json is not the config the run trained, or None: the trainer records config.json's fingerprint in
    the manifest as the run begins (RunFolder.begin writes both), so a fingerprint that differs from it now says
    config.json was edited since, and the folder's records are another config's (a 2-epoch run whose config.json
    says 3 epochs). A manifest without one records nothing to compare."""
    recorded = manifest.get("config_fingerprint") if isinstance(manifest, dict) else None
    if not isinstance(config, dict) or recorded is None:
        return None
    now = document_fingerprint(config)
    if recorded == now:
        return None
    return (f"{CONFIG}'s fingerprint {now} is not the {recorded!r} its {MANIFEST} recorded as the run began: "
            f"{CONFIG} was changed after the run, so what it trained is not what {CONFIG} says")


def record_problem(run_dir: str | Path) -> str | None:
    """Why a run folder that has an identity still cannot count as the run its documents name, or None:
    config.json changed after the run (config_changed), or a finished run (FINISHED) whose metrics.jsonl, what it
    trained, is missing or unreadable (deleted, a folder, empty). A study neither skips nor resumes such a folder;
    reference-add refuses it."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    changed = config_changed(read_config(run_dir), manifest)
    if changed:
        return changed
    status = manifest.get("status") if isinstance(manifest, dict) else None
    metrics = metrics_problem(run_dir) if status in FINISHED else None
    if metrics:
        return f"{MANIFEST} says {status} but its {METRICS} is {metrics}: what the run trained cannot be read"
    return None


@dataclass
class Metrics:
    """What a metrics.jsonl holds: its good records in order, the bad lines counted, and a problem if any."""

    records: list[dict]
    bad_lines: int = 0
    problem: str | None = None  # "missing", "empty", "no readable record", "unreadable (...)"

    def of(self, kind: str) -> list[dict]:
        return [r for r in self.records if r["kind"] == kind]


def read_metrics(path: str | Path) -> Metrics:
    """Every record of a metrics.jsonl (a run folder or the file itself), plain or gzip'd (contract/runfiles.py)."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS
    try:
        data = read_run_file(path)
    except FileNotFoundError:
        return Metrics([], 0, "missing")
    except OSError as e:
        return Metrics([], 0, f"unreadable ({type(e).__name__}: {e.strerror or e})")
    records, bad = parse_lines(data.split(b"\n"))
    problem = None
    if not data.strip():
        problem = "empty"
    elif not records:
        problem = "no readable record"
    return Metrics(records, bad, problem)


def metrics_problem(run_dir: str | Path, tail_bytes: int = 65536) -> str | None:
    """read_metrics(run_dir).problem, told from the end of metrics.jsonl alone: a study asks it of every finished
    run it plans (record_problem), and a thesis-scale run's records are tens of MB. A finished run ends its records
    with its status record, so a file whose end holds no record holds no run's end either."""
    try:
        with open_run_file(Path(run_dir) / METRICS) as f:  # a folder: IsADirectoryError, as read_metrics says it
            size = f.seek(0, 2)
            f.seek(max(0, size - tail_bytes))
            lines = f.read().split(b"\n")[1 if size > tail_bytes else 0:]  # the first line may be cut
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"unreadable ({type(e).__name__}: {e.strerror or e})"
    if size <= tail_bytes and not b"".join(lines).strip():
        return "empty"
    return None if any(parse_record(line) for line in lines if line.strip()) else "no readable record"


def last_record(path: str | Path, kind: str, tail_bytes: int = 65536) -> dict | None:
    """The newest record of one kind, reading only the end of the file (for progress lines)."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS
    try:
        with open_run_file(path) as f:
            start = max(0, f.seek(0, 2) - tail_bytes)
            f.seek(start)
            lines = f.read().split(b"\n")
    except OSError:
        return None
    if start:
        lines = lines[1:]  # the first line may be cut
    for line in reversed(lines):
        rec = parse_record(line) if line.strip() else None
        if rec is not None and rec["kind"] == kind:
            return rec
    return None


# ================================================================================================================
# A tree of folders, one DataFrame
# ================================================================================================================
def find_runs(root: str | Path) -> list[Path]:
    """The run folders under root, sorted: any folder holding config.json, manifest.json or metrics.jsonl (plain or
    gzip'd)."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(set().union(*(holding(root, name) for name in (CONFIG, MANIFEST, METRICS))))


def holds_runs(root: str | Path) -> bool:
    """Whether root holds a run laid out as <root>/<experiment>/<run>/config.json."""
    root = Path(root)
    return root.is_dir() and any(root.glob(f"*/*/{CONFIG}"))


def read_runs(root: str | Path) -> pd.DataFrame:
    """Every run folder under root as one DataFrame: a row per folder, then a row per record of its metrics.jsonl.

    The tree it reads (contract/runfolder.py writes it; any folder below root holding one of the three files read
    is a run folder, so <root> may be one experiment's folder too):

        <root>/                          results/runs, results/reference/vm-2cpu, ...
        └── <experiment>/                05_linear_scaling
            └── <run>/                   w32-s0
                ├── config.json          the resolved config           -> column `config` (a dict)
                ├── manifest.json        versions, hosts, start, end,  -> column `manifest` (a dict)
                │                        status, epochs_done
                ├── metrics.jsonl        one record a line             -> a row per record, a column per field
                │                        (metrics.jsonl.gz in a committed run: contract/runfiles.py)
                ├── train.log            human lines                   (not read: the records hold its numbers)
                ├── checkpoint.pt        the trainer's state           (not read)
                └── .lock                while a process trains it     (not read: contract/locks.py)

    Columns (IDENTITY, FOLDER, RECORD above, then any other key a record holds, named as written):
      experiment, run, path  the folder's parent's name, its name, and its path (str) -- every row;
      kind                   "run" for the folder's row, else the record's kind (iter, epoch, eval, bench, status, util);
      config, manifest       the folder's JSON documents, None where missing or unreadable;
      fingerprint            the config's fingerprint (contract/fingerprint.py), None without a readable config;
      bad_lines              metrics.jsonl's lines that are not a record of a declared kind (skipped);
      problems               a tuple of what was wrong with the folder ("manifest.json: missing", ...);
      left_out               True for a folder read no further (a manifest of another version, a config.json
                             changed after the run): its row alone;
      time, epoch, lr, ...   a record's fields, each as written: a field a record does not hold is None (a NaN the
                             trainer wrote stays NaN), so every column is of object dtype.
    The folder rows come in path order, each followed by its records in the order they were written. Every problem
    is also in df.attrs["problems"], as "<path>: <problem>".
    """
    return _table([row for run_dir in find_runs(root) for row in _folder_rows(run_dir)])


def read_run(run_dir: str | Path) -> pd.DataFrame:
    """One run folder as read_runs reads each: its row, then a row per record."""
    return _table(_folder_rows(Path(run_dir)))


def _folder_rows(run_dir: Path) -> list[dict]:
    """A folder's row, then its records' rows; a folder left out (_left_out), its row alone."""
    config, config_problem = read_document(run_dir / CONFIG)
    identity = {"experiment": run_dir.parent.name, "run": run_dir.name, "path": str(run_dir)}
    try:
        manifest, manifest_problem = read_manifest_document(run_dir)
    except ManifestError as err:  # one folder of another version never takes a tree down: its line, no rows
        return [_left_out(identity, config, None, str(err).removeprefix(str(run_dir / MANIFEST) + ": "))]
    damaged = two_forms(run_dir)
    if damaged:  # a record file both plain and gzip'd: which is the run's cannot be told, so neither is read
        return [_left_out(identity, config, manifest, damaged)]
    changed = config_changed(config, manifest)
    if changed:  # its records are another config's: read as config.json's run, it would be counted wrong
        return [_left_out(identity, config, manifest, f"{changed}; restore its {CONFIG} or remove the folder "
                                                      f"(rm -r {run_dir})")]
    metrics = read_metrics(run_dir / METRICS)
    problems = [f"{name}: {problem}" for name, problem in
                ((CONFIG, config_problem), (MANIFEST, manifest_problem), (METRICS, metrics.problem)) if problem]
    if metrics.bad_lines:
        problems.append(f"{METRICS}: {metrics.bad_lines} bad line(s) skipped")
    # read as it is, never repaired: a breach is the folder's problem line, and its records stay as written
    problems += [f"breaks {breach}" for breach in check_run(config, manifest, metrics.records)]
    folder = {**identity, "kind": "run", "config": config, "manifest": manifest,
              "fingerprint": None if config is None else document_fingerprint(config),
              "bad_lines": metrics.bad_lines, "problems": tuple(problems), "left_out": False}
    return [folder] + [{**record, **identity} for record in metrics.records]


def _left_out(identity: dict, config: dict | None, manifest: dict | None, why: str) -> dict:
    """The row of a folder read no further: counted in no table, its one problem line says why and what to do."""
    return {**identity, "kind": "run", "config": config, "manifest": manifest, "fingerprint": None, "bad_lines": 0,
            "problems": (f"left out: {why}",), "left_out": True}


def _table(rows: list[dict]) -> pd.DataFrame:
    """The rows as a DataFrame of object columns (values exactly as read, None where a row has no such key), the
    folders' problems in its attrs."""
    import pandas as pd  # here, not at the top: the trainers read manifests without loading pandas

    columns = list(dict.fromkeys([*IDENTITY, *FOLDER, *RECORD, *(key for row in rows for key in row)]))
    df = pd.DataFrame(rows, columns=columns, dtype=object)
    # pandas fills a key a row lacks with NaN: make it None, so that it is never taken for a NaN the trainer wrote
    # (rows with the same keys at once: a tree's records have a handful of shapes)
    shapes: dict[frozenset, list[int]] = {}
    for i, row in enumerate(rows):
        shapes.setdefault(frozenset(row), []).append(i)
    for keys, at in shapes.items():
        lacking = [j for j, c in enumerate(columns) if c not in keys]
        if lacking:
            df.iloc[at, lacking] = None
    df.attrs["problems"] = [f"{row['path']}: {p}" for row in rows if row["kind"] == "run" for p in row["problems"]]
    return df
