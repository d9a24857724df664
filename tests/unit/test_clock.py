"""One timestamp format for run records, cluster locks and audit bundles."""

from dapo_ops.clock import utc_compact, utc_now


def test_timestamps_are_utc_iso_with_z_and_compact_names_sort_by_time():
    assert utc_now(0) == "1970-01-01T00:00:00Z"
    assert utc_now(1764582300) == "2025-12-01T09:45:00Z"
    assert utc_compact(1764582300) == "20251201-094500"
    assert utc_compact(1764582300) < utc_compact(1764582301 + 86400)
