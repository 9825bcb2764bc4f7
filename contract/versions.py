"""What a run's manifest records about the software it ran on: the installed versions and the git commit."""
from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent
        )
        return out.stdout.strip() if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """Installed versions, read from package metadata (importing Horovod to ask would initialise it)."""
    return {"python": platform.python_version(), "torch": package_version("torch"),
            "torchvision": package_version("torchvision"), "horovod": package_version("horovod")}
