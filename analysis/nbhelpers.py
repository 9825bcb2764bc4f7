"""Small functions every notebook calls, so that each notebook cell stays one or two lines (a plug-in's own are in
its module, offered as an.<name> by its EXPORTS)."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from . import figures as fg  # noqa: E402


def subplots(nrows: int = 1, ncols: int = 1, width: float = 6.5, height: float = 4.2):
    """plt.subplots with a size per panel; returns (fig, axes) (axes a single Axes for 1x1)."""
    return plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows))


def show(fig_or_ax):
    """Render a figure to PNG (fixed metadata, so reruns give identical bytes) for a notebook to display."""
    from IPython.display import Image

    fig = getattr(fig_or_ax, "figure", fig_or_ax)
    if hasattr(fig_or_ax, "flat"):
        fig = fig_or_ax.flat[0].figure
    buf = io.BytesIO()
    fg.pin_layout(fig, dpi=80)  # a constrained layout's solve differs in its last bits between processes: pinned
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return Image(data=buf.getvalue(), format="png")


def overview(df: pd.DataFrame) -> pd.DataFrame:
    """Runs per experiment, scale and status."""
    r = df[df["kind"] == "run"]
    if r.empty:
        return pd.DataFrame({"note": ["no runs found: tables show the thesis's values only"]})
    return (r.groupby(["experiment", "scale", "status"], dropna=False).size().rename("runs").reset_index())
