"""Figures as people read them: durations, token counts, dollars, bytes (the web UI and the CLI)."""

from __future__ import annotations

import math

__all__ = ["duration", "money", "size", "tokens"]


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


def tokens(count: int | float | None) -> str:
    if count is None or not math.isfinite(count):
        return "—"
    if count < 0:
        return "-" + tokens(-count)
    if count < 1000:
        return str(int(count))
    # The unit by the figure as shown: 999,999 is "1.00M", not "1000.0k".
    if count < 999_950:
        return f"{count / 1000:.1f}k"
    if count < 999_995_000:
        return f"{count / 1_000_000:.2f}M"
    return f"{count / 1_000_000_000:,.2f}B"


def money(dollars: float | None) -> str:
    if dollars is None:
        return "—"
    return f"${dollars:.4f}" if dollars < 1 else f"${dollars:,.2f}"


def size(count: int | None) -> str:
    if count is None:
        return "—"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"
