"""A run's states and the moves between them (pure). The run record (launch/records.py) keeps the state as its
string; every change goes through RunRecord.mark, which refuses a move not listed here."""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    CREATED = "created"        # the record exists; nothing touched yet
    STARTING = "starting"      # locks taken, Ray being brought up and rehearsed
    RUNNING = "running"        # the job is submitted
    SUCCEEDED = "succeeded"    # Ray reports the job SUCCEEDED
    FAILED = "failed"          # the launch, the job or a node failed (the reason says which)
    STOPPED = "stopped"        # `dapo-ops stop` took it down
    REHEARSED = "rehearsed"    # --rehearse-only: the rehearsal passed and the cluster is down again


# Where each state may go; a state may always be marked again (a new reason, a new timestamp).
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.CREATED: frozenset({RunState.STARTING, RunState.FAILED}),
    RunState.STARTING: frozenset({RunState.RUNNING, RunState.REHEARSED, RunState.FAILED, RunState.STOPPED}),
    RunState.RUNNING: frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.STOPPED}),
    RunState.SUCCEEDED: frozenset({RunState.STOPPED}),
    RunState.FAILED: frozenset(),
    RunState.STOPPED: frozenset(),
    RunState.REHEARSED: frozenset(),
}
# Launching (or reaping a dead launcher's record): the states a launcher still owns
IN_FLIGHT = frozenset({RunState.CREATED, RunState.STARTING})


def may_move(current: str, new: str) -> bool:
    """Whether a run in `current` may be marked `new` (an unknown state never may)."""
    try:
        before, after = RunState(current), RunState(new)
    except ValueError:
        return False
    return after == before or after in TRANSITIONS[before]
