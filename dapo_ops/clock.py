"""The one timestamp format of run records, locks and audit bundles: UTC, second resolution, ISO 8601 with Z."""

from __future__ import annotations

import time

ISO_UTC = "%Y-%m-%dT%H:%M:%SZ"


def utc_now(seconds: float | None = None) -> str:
    """`2026-12-01T09:45:00Z` for now (or for `seconds` since the epoch)."""
    return time.strftime(ISO_UTC, time.gmtime(seconds))


def utc_compact(seconds: float | None = None) -> str:
    """`20261201-094500`, for names (run ids) that sort by time."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(seconds))
