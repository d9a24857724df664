"""Port numbers and ranges as the inventory and the firewall tools write them: parsed, checked and printed."""

from __future__ import annotations

import re

from dapo_ops.errors import InventoryError

Ranges = tuple[tuple[int, int], ...]

_SPAN = re.compile(r"(\d{1,5})(?:\s*[-:]\s*(\d{1,5}))?")


def span(text: str) -> tuple[int, int] | None:
    """'6379', '10002-19999' or '10002:19999' -> (first, last); None when it is not that or out of 1-65535."""
    m = _SPAN.fullmatch(text.strip())
    if not m:
        return None
    first, last = int(m.group(1)), int(m.group(2) or m.group(1))
    return (first, last) if 1 <= first <= last <= 65535 else None


def ranges(text: str) -> Ranges | None:
    """'6379', '6379,8265', '10002:19999' -> ranges; None when any item is not a port or a range."""
    spans = [span(item) for item in re.split(r"[\s,]+", text) if item]
    return None if not spans or None in spans else tuple(spans)


def covers(port_ranges: Ranges, port: int) -> bool:
    """Whether port is in one of the ranges."""
    return any(a <= port <= b for a, b in port_ranges)


def parse_port_spec(spec: object, what: str = "port") -> tuple[int, int]:
    """6379, "6379" or "10002-19999" (also "10002:19999") -> (first, last); InventoryError on anything else."""
    text = str(spec).strip() if isinstance(spec, (int, str)) and not isinstance(spec, bool) else ""
    if not _SPAN.fullmatch(text):
        raise InventoryError(f"{what}: {spec!r} is not a port or a range FIRST-LAST")
    found = span(text)
    if found is None:
        raise InventoryError(f"{what}: {spec!r} is not within 1-65535 with FIRST <= LAST")
    return found


def parse_port_map(ports: object, what: str) -> dict[str, tuple[int, int]]:
    """{name: port or "first-last"} as the inventory gives it -> {name: (first, last)}."""
    if not isinstance(ports, dict) or not ports:
        raise InventoryError(f"{what} must be a mapping of name -> port or FIRST-LAST, got {ports!r}")
    return {str(name): parse_port_spec(spec, f"{what}.{name}") for name, spec in ports.items()}


def format_ranges(port_ranges: list[tuple[int, int]]) -> str:
    """[(6379, 6379), (10002, 10003), (10004, 10010)] -> '6379, 10002-10010' (adjacent ranges joined)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(port_ranges):
        if out and out[-1][1] >= a - 1:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)
