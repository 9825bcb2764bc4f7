"""What physics forbids and what the record says was disturbed: the reasons a throughput row is flagged, one
string a row (`flag`: "" for a clean row, else reasons joined by "; "), shown in the row of every table that has a
speed-up, on the speed-up figure and in a study's closing table.

Why: a speed-up above its ideal p is impossible for data parallelism (p processes do at most p times the work of
one); when a table shows one, its baseline was slowed -- a busy host, a rank crowded out, a baseline run with other
threads a rank -- and the number measures that, not scaling. MLPerf rejects such a result; the report keeps it,
flagged with its reason, so a reader sees both the number and why not to believe it.
"""
from __future__ import annotations

import math

FLAG_SEPARATOR = "; "


def above_ideal(speedup: float, processes: float) -> str:
    """A speed-up above the processes' count (to the two decimals shown): its reason, else ""."""
    if not finite(speedup) or not finite(processes) or processes < 1:
        return ""
    if round(speedup, 2) <= processes:
        return ""
    return f"speed-up {speedup:.2f} above its ideal {processes:g} (impossible: its baseline was slowed)"


def unlike_threads(threads: float, base_threads: float) -> str:
    """A speed-up over a baseline that ran with other threads a rank: its reason, else ""."""
    if not finite(threads) or not finite(base_threads) or threads == base_threads:
        return ""
    return f"unlike: baseline ran {base_threads:g} thread(s) a rank, this row {threads:g}"


def speedup_flag(speedup: float, processes: float, threads: float = math.nan, base_threads: float = math.nan,
                 disturbed: str = "", base_disturbed: str = "") -> str:
    """Every reason a speed-up row is flagged, joined; "" for a clean row."""
    reasons = [above_ideal(speedup, processes), unlike_threads(threads, base_threads), text(disturbed)]
    if text(base_disturbed):
        reasons.append(f"baseline: {text(base_disturbed)}")
    return join(reasons)


def join(reasons) -> str:
    """Distinct non-empty reasons, in order, as one cell."""
    return FLAG_SEPARATOR.join(dict.fromkeys(r for r in reasons if r))


def text(value) -> str:
    """A flag cell's text ("" for NaN or None: a row of the thesis, or of a run before this was recorded)."""
    return value if isinstance(value, str) else ""


def finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
