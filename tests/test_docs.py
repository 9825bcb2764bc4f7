"""The guides are checked by running them: every dry-run and config command in a code block of the README and
docs/*.md runs as written (a user's own profile, `mysite`, is the one docs/cluster.md writes out), and exits 0."""
import re
import shlex
import subprocess
import sys

import pytest

from tests.helpers import REPO

GUIDES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUNNABLE = re.compile(r"^(make \S+ .*DRY_RUN=1|\.venv/bin/python -m trainers (config|schedule) .*)$")


def code_lines(path):
    """Each line of the guide's fenced code blocks, its trailing comment removed."""
    inside, lines = False, []
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside:
            lines.append(line.split("  #")[0].strip())
    return lines


def site_profile(tmp_path):
    """The profile docs/cluster.md tells a user to write, as they would write it."""
    block = re.search(r"```toml\n(.*?)```", (REPO / "docs" / "cluster.md").read_text(), re.S).group(1)
    path = tmp_path / "mysite.toml"
    path.write_text(block)
    return path


COMMANDS = [(p.name, line) for p in GUIDES for line in code_lines(p) if RUNNABLE.match(line)]


def test_the_guides_have_commands_to_check():
    assert {name for name, _ in COMMANDS} >= {"README.md", "cluster.md", "training.md"}


@pytest.mark.parametrize("guide, command", COMMANDS, ids=[f"{g}: {c[:60]}" for g, c in COMMANDS])
def test_a_guides_command_runs_as_written(guide, command, tmp_path):
    argv = shlex.split(command.replace("CLUSTER=mysite", f"CLUSTER={site_profile(tmp_path)}"))
    if argv[0] == "make":
        argv[1:1] = ["-s", "-o", ".venv/.installed"]  # the venv is this test run's own
    else:
        argv[0] = sys.executable
    env = {"PATH": "/usr/bin:/bin", "SLURM_ACCOUNT": "myproj", "IMAGENET_TAR": "/shared/imagenet-256.tar",
           "IMAGENET_DIR": "/data/imagenet", "HOME": str(tmp_path)}
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-2000:]
    if "DRY_RUN=1" in command and "LAUNCHER=slurm" in command:
        assert "sbatch " in result.stdout


PROSE_WIDTH = 120  # the guides' prose lines, as the code's


def long_prose_lines(path) -> list[int]:
    """Line numbers of prose over PROSE_WIDTH columns: tables, fenced code and the blocks another command copies in
    (`<!-- ...: copied from ... -->` up to its `end -->`) are left as they are written."""
    fenced = copied = False
    long = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        text = line.strip()
        if text.startswith("```"):
            fenced = not fenced
            continue
        if text.startswith("<!--") and "copied from" in text:
            copied = True
        elif text.startswith("<!--") and text.endswith("end -->"):
            copied = False
        if not (fenced or copied or text.startswith("|")) and len(line) > PROSE_WIDTH:
            long.append(number)
    return long


@pytest.mark.parametrize("path", [*GUIDES, *sorted((REPO / "experiments").glob("*/README.md"))],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_the_guides_prose_lines_fit_120_columns(path):
    assert long_prose_lines(path) == [], f"{path.relative_to(REPO)}: reflow these lines to {PROSE_WIDTH} columns"


def test_a_long_prose_line_is_found_and_tables_code_and_copied_blocks_are_not(tmp_path):
    guide = tmp_path / "guide.md"
    long = "word " * 30
    guide.write_text(f"{long}\n| {long} |\n```\n{long}\n```\n<!-- x: copied from y -->\n{long}\n<!-- x end -->\n{long}\n")
    assert long_prose_lines(guide) == [1, 9]
