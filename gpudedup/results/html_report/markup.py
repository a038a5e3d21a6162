"""How report.html writes values: escaped text, numbers with thousands separators, byte counts,
seconds, percentages."""

from __future__ import annotations

import html
import math

from ...display import bytes_shown
from ...stages import seconds_text


def escaped(value) -> str:
    """``value`` as HTML text (None: nothing)."""
    return html.escape("" if value is None else str(value), quote=True)


def number(value) -> str:
    """A parameter number as written: 0.8, 5, 1,024."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.6g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return escaped(value)


def value_of(key: str, value) -> str:
    """A parameter's or count's value as a table cell's markup."""
    if value is None:
        return '<span class="why">—</span>'
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key in ("batch_bytes", "max_memory", "shard_bytes") and isinstance(value, int):
        return f"{value:,} <span class=\"why\">({byte_count(value)})</span>"
    if isinstance(value, (int, float)):
        return number(value)
    if isinstance(value, (list, tuple)):
        return escaped(", ".join(str(v) for v in value))
    if isinstance(value, dict):
        return escaped(", ".join(f"{k}: {v}" for k, v in value.items()))
    return escaped(value)


def byte_count(count, exact: bool = False) -> str:
    """Bytes in binary units (3.4 MiB: display.bytes_shown); exact: the byte count first, the
    short form after."""
    count = int(count or 0)
    short = bytes_shown(count)
    return f"{count:,} bytes ({short})" if exact and count >= 1024 else short


def mib(value) -> str:
    return "" if value is None else f"{value:,.1f}\u00a0MiB"  # no break before the unit


def seconds(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return seconds_text(value)


def percent(fraction: float) -> str:
    if fraction == 0:
        return "0 %"
    if fraction < 0.001:
        return f"{fraction * 100:.3f} %"
    return f"{fraction * 100:.1f} %" if fraction >= 0.01 else f"{fraction * 100:.2f} %"


def ratio(part, whole) -> float:
    return part / whole if whole else 0.0
