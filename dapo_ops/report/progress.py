"""Where a run is, for `top RUN`: its latest step, that step's time and tokens per second, read from its logs as
`report` reads them (the Ray job's console, verl's file-logger JSONL filling in)."""

from __future__ import annotations

from pathlib import Path

from dapo_ops.errors import DapoError
from dapo_ops.report.steps import STEP_TIME
from dapo_ops.report.summary import TOKENS, training_steps
from dapo_ops.telemetry.model import RunProgress


def run_progress(record, inventory, directory: Path) -> RunProgress:
    from dapo_ops.report.fetch import fetch_run_logs
    from dapo_ops.report.outputs import read_logs

    state = str(record.state)
    if not record.submission_id:
        return RunProgress(record.run_id, state, note="never submitted")
    try:
        fetched = fetch_run_logs(record, inventory, directory, lambda _: None)
        run = read_logs([*fetched.earlier, fetched.console], fetched.jsonl)
    except DapoError as exc:
        return RunProgress(record.run_id, state, note=f"its log could not be read: {exc}")
    steps = training_steps(run)
    if not steps:
        return RunProgress(record.run_id, state, note="no training step logged yet")
    step, metrics = steps[-1]
    seconds = float(metrics[STEP_TIME])
    tokens = metrics.get(TOKENS)
    return RunProgress(record.run_id, state, step, seconds,
                       float(tokens) / seconds if tokens is not None and seconds > 0 else None)
