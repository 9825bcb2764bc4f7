"""manifest.json declared: the run record's sections, their fields, and the version a manifest is written at.

A manifest is one flat JSON object (the readers look a field up by its name, whichever section declares it);
SECTIONS says which part of the record (docs/architecture.md) each field is and what it must hold. Only
RunFolder.begin/progress/end (contract/runfolder.py) write one, and each write is checked here: a field no section
declares, or a value of the wrong kind, is a bug in the writer, raised before anything is written. A reader given a
manifest older than VERSION stops with one line naming `python -m tools migrate-manifests`
(tools/migrate_manifests.py, the one place that knows the older versions).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from contract.config import ConfigError

VERSION = 1
MIGRATE = "python -m tools migrate-manifests"
STATUSES = ("running", "completed", "diverged", "failed", "preempted")

_TEXT, _NUMBER, _MAYBE_TEXT = (str,), (int, float), (str, type(None))
REQUIRED, OPTIONAL = True, False
#: section -> field -> (the types its value may have, required in every manifest)
SECTIONS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "identity": {
        "manifest_version": ((int,), REQUIRED),
        "config_fingerprint": (_TEXT, REQUIRED),  # config.json's (contract/fingerprint.py) when the run began
        "seed": ((int,), REQUIRED),
        "machine": ((dict,), REQUIRED),  # contract/machine.py FIELDS, those that were measured
        "backend": (_TEXT, REQUIRED),
        "framework": (_TEXT, OPTIONAL),  # the TensorFlow trainer's; a PyTorch run's is its config's
        "world_size": ((int,), REQUIRED),  # processes (the node scale's P)
        "workers": ((int,), REQUIRED),  # logical workers W
        "link": (_MAYBE_TEXT, OPTIONAL),  # tc's rate where the local cluster limited one (make link-sweep)
        "smoke": ((bool,), REQUIRED),  # QUICK settings or a step cap: no result of its study (analysis/smoke.py)
    },
    "placement": {
        "launcher": (_TEXT, REQUIRED),
        "hosts": ((list,), REQUIRED),
        "devices": ((list,), REQUIRED),
        "placement": ((list,), OPTIONAL),  # one entry a rank (contract/placement.py)
        "threads": ((dict,), OPTIONAL),
        "workers_per_pass": ((int,), OPTIONAL),
        "workers_per_rank": ((int,), OPTIONAL),
        "horovod": ((dict, type(None)), OPTIONAL),
    },
    "environment": {
        "versions": ((dict,), REQUIRED),
        "git_commit": (_MAYBE_TEXT, REQUIRED),
        "cpu": ((dict,), OPTIONAL),
        # a plug-in workload's description of the data it read (workloads/): a GPT corpus's source, tokens, sha256s
        "dataset": ((dict,), OPTIONAL),
    },
    "attempts": {
        "start": (_TEXT, REQUIRED),
        "resumed_at": (_MAYBE_TEXT, OPTIONAL),
        "attempts": ((list,), OPTIONAL),  # runs before it was recorded have none
    },
    "status": {
        "status": (_TEXT, REQUIRED),
        "epochs_done": ((int,), REQUIRED),
        "end": (_MAYBE_TEXT, REQUIRED),
        "exit_code": ((int, type(None)), OPTIONAL),
        "message": (_MAYBE_TEXT, OPTIONAL),
        "failed_ranks": ((list, type(None)), OPTIONAL),
        "best_val_top1": ((*_NUMBER, type(None)), OPTIONAL),
        "data_wait_share": (_NUMBER, OPTIONAL),
        "skipped_steps": ((int,), OPTIONAL),
        "unreadable_images": ((dict,), OPTIONAL),
        "capped_at_steps": ((int,), OPTIONAL),  # train.max_steps cut the run short
        "weights_agree": ((dict,), OPTIONAL),  # the TensorFlow benchmark's check
    },
}
FIELDS = {name: spec for section in SECTIONS.values() for name, spec in section.items()}


class ManifestError(ConfigError):
    """A manifest of an older version (migrate it), or one its writer got wrong; the message is one line."""


def field_problem(name: str, value: Any) -> str | None:
    """What is wrong with one field (undeclared, or a value of the wrong kind), or None."""
    if name not in FIELDS:
        return f"{name} is no field of the declared manifest (contract/manifest.py SECTIONS)"
    types, _ = FIELDS[name]
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        return f"{name} is {value!r}, not {' or '.join(t.__name__ for t in types)}"
    if name == "status" and value not in STATUSES:
        return f"status is {value!r}, not one of {', '.join(STATUSES)}"
    return None


def check_fields(fields: dict[str, Any]) -> None:
    """The writer's check of the fields it is about to write (RunFolder): ManifestError on the first problem."""
    for name, value in fields.items():
        problem = field_problem(name, value)
        if problem:
            raise ManifestError(f"manifest.json: {problem}")


def problem(manifest: dict[str, Any]) -> str | None:
    """The first thing that keeps a whole manifest from being the declared record, as one line naming the field:
    an older version, a required field missing, a field undeclared or of the wrong kind. None: it is one."""
    stale = version_problem(manifest)
    if stale:
        return stale
    missing = [name for name, (_, required) in FIELDS.items() if required and name not in manifest]
    if missing:
        return f"{missing[0]} is missing (a required field of the declared manifest)"
    return next(filter(None, (field_problem(name, value) for name, value in manifest.items())), None)


def version_problem(manifest: dict[str, Any]) -> str | None:
    """Why a manifest is not of the current version, or None."""
    version = manifest.get("manifest_version", 0)
    if isinstance(version, int) and not isinstance(version, bool) and version <= VERSION:
        return None if version == VERSION else f"manifest_version is {version}, older than {VERSION}"
    return f"manifest_version is {version!r}, which this suite does not know (it writes {VERSION})"


def check_version(manifest: Any, path: Path | str) -> None:
    """What every reader does with a manifest it read: an older version stops it with the command that migrates
    the runs, an unknown one with what it is; anything else (a manifest half-made by hand, or not an object) is left
    to the reader to judge."""
    if not isinstance(manifest, dict):
        return
    stale = version_problem(manifest)
    if stale and "older" in stale:
        raise ManifestError(f"{path}: {stale}; migrate its runs first: {MIGRATE} {Path(path).parent.parent.parent}")
    if stale:
        raise ManifestError(f"{path}: {stale}; read it with the suite that wrote it")
