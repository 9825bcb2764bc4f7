"""How every command line of the suite ends: a user's mistake is one line and exit 2, never a traceback."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

from contract.config import Config, ConfigError, load_config, load_planned
from contract.runfolder import WRITE_FAILURES, check_run_name


def one_line_errors(command: Callable[[], int], mistakes: tuple[type[BaseException], ...] = ()) -> int:
    """Run `command`; a ConfigError (or one of `mistakes`, a room's own kinds of user error) prints `error: ...`
    and exits 2; a full or read-only disk exits 1 with what to fix; Ctrl-C 130; output piped into `head` 141."""
    try:
        return command()
    except (ConfigError, *mistakes) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in WRITE_FAILURES:
            raise
        # a full or read-only disk before a run could say so itself (a run that started marks itself failed)
        print(f"error: cannot write {e.filename or 'the output'}: {e.strerror}; free space or pick another --out",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly, as other command-line tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def out_folder(text: str) -> Path:
    """--out as a folder; empty would quietly mean the current folder (the repository's root)."""
    if not text.strip():
        raise ConfigError("--out is empty; give the runs' folder (default results/runs)")
    return Path(text)


def command_word(argv: list[str], known: dict, usage: str, noun: str = "command") -> str | int:
    """The command word `argv` starts with, or the exit code where there is none to run: --help prints `usage`
    (0), no word prints it too (2), an unknown word is one line naming the known ones (2)."""
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(usage)
        return 0 if argv else 2
    if argv[0] not in known:
        print(f"error: no {noun} {argv[0]!r}; the {noun}s: {', '.join(known)}", file=sys.stderr)
        return 2
    return argv[0]


DEFAULT_OUT = "results/runs"


def run_to_train(config: str, scale: str | None, sets: list[str], out: str | None, run: str | None,
                 default_name: Callable[[Config], str]) -> tuple[Config, Path]:
    """A trainer's (config, run folder): from a run's config.json, as its study planned it (the folder it is in),
    or from an experiment's config at `scale` with `--set` overrides, in <out>/<experiment>/<run>."""
    if config.endswith(".json"):
        given = [flag for flag, value in (("--scale", scale), ("--out", out), ("--run", run)) if value is not None]
        if given:
            raise ConfigError(f"{given[0]} with {config}: a run's config.json is already resolved and names its "
                              "folder; leave it out (or train from the experiment's config.toml)")
        return load_planned(Path(config), sets), Path(config).parent
    if run is not None:
        check_run_name(run)  # a run folder stays inside the output folder
    cfg = load_config(config, scale or "local", sets)
    return cfg, out_folder(DEFAULT_OUT if out is None else out) / cfg.experiment / (run or default_name(cfg))
