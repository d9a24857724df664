"""The launch's step timeouts from the inventory (dapo_launch_timeouts), and a lock judged by its launcher's own
bring-up limit."""

import pytest

from dapo_ops.errors import InventoryError
from dapo_ops.launch.locks import Lock, breakable
from dapo_ops.model.timeouts import DEFAULT_TIMEOUTS, bring_up_limit, step_timeouts


def test_the_inventory_sets_some_steps_and_the_rest_keep_their_defaults():
    assert step_timeouts(None) == DEFAULT_TIMEOUTS
    assert step_timeouts({"workers": 20}) == dict(DEFAULT_TIMEOUTS, workers=20)
    assert bring_up_limit({"a": 10, "b": 20}, 5) == 70


@pytest.mark.parametrize("given, message", [
    ({"worker": 20}, "dapo_launch_timeouts.worker: not a launch step"),
    ({"workers": "20"}, "dapo_launch_timeouts.workers: '20' is not a whole number of seconds in 5-7200"),
    ({"head": 2}, "dapo_launch_timeouts.head: 2 is not a whole number of seconds"),
    ({"head": True}, "dapo_launch_timeouts.head: True is not a whole number"),
    ([20], "dapo_launch_timeouts must be a mapping"),
])
def test_a_bad_value_is_refused_naming_the_step(given, message):
    with pytest.raises(InventoryError, match="^" + message.replace("(", r"\(")):
        step_timeouts(given)


def test_a_lock_from_another_controller_is_judged_by_its_launchers_limit():
    created, now = "2026-12-01T10:00:00Z", 1796119200.0 + 3600  # an hour later
    mine = Lock("r1", "other-host", 42, created)
    patient = Lock("r2", "other-host", 42, created, bring_up_limit=7200.0)
    assert breakable(mine, [], "unknown", 1800, now=now)[0] is True
    gone, why = breakable(patient, [], "unknown", 1800, now=now)
    assert gone is False and "retry after 120 min" in why
