"""How long each launch step may take (pure): dapo-ops' defaults, or the inventory's `LAUNCH_TIMEOUTS`.

A large cluster may need longer than the defaults, and a small one may want a lost node found sooner. A lock
records its launcher's bring-up limit, so that another controller judges it by the launcher's own timeouts
(locks.breakable)."""

from __future__ import annotations

from typing import Mapping

from dapo_ops.errors import InventoryError
from dapo_ops.model.variables import LAUNCH_TIMEOUTS

INVENTORY_VAR = LAUNCH_TIMEOUTS.name
# Seconds per step. "head" bounds the whole Ray start (head and workers together); "workers" one worker's attempt
# (waiting for the head's GCS port, then `ray start`); Ray itself takes ~60 s to declare a lost node dead.
DEFAULT_TIMEOUTS = {"audit": 120, "stop": 60, "head": 120, "workers": 60, "cluster": 90, "submit": 120}
LIMITS = (5, 7200)


def step_timeouts(given: object, what: str = INVENTORY_VAR) -> dict[str, int]:
    """The defaults with the inventory's values over them; InventoryError naming the key for anything else than
    a known step and a whole number of seconds in LIMITS."""
    if given is None:
        return dict(DEFAULT_TIMEOUTS)
    if not isinstance(given, Mapping):
        raise InventoryError(f"{what} must be a mapping of step -> seconds, got {given!r}")
    merged = dict(DEFAULT_TIMEOUTS)
    for key, value in given.items():
        if key not in DEFAULT_TIMEOUTS:
            raise InventoryError(f"{what}.{key}: not a launch step ({', '.join(DEFAULT_TIMEOUTS)})")
        if isinstance(value, bool) or not isinstance(value, int) or not LIMITS[0] <= value <= LIMITS[1]:
            raise InventoryError(f"{what}.{key}: {value!r} is not a whole number of seconds in "
                                 f"{LIMITS[0]}-{LIMITS[1]}")
        merged[key] = value
    return merged


def bring_up_limit(timeouts: Mapping[str, int], rehearsal_seconds: float) -> float:
    """Longer than any launch with these timeouts can hold its locks before Ray runs (every step at its deadline,
    pushing and the rehearsal included, with room to spare): a lock this old, with no Ray on its nodes, has no
    launcher behind it."""
    return 2 * (sum(timeouts.values()) + rehearsal_seconds)
