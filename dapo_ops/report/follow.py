"""`report --follow`: the summary table, redrawn in place (rich Live) from a fresh read of the logs every interval,
until the job ends or Ctrl-C."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.live import Live
from rich.table import Table

from dapo_ops.report.steps import RunMetrics


def follow(load: Callable[[], RunMetrics], render: Callable[[RunMetrics], Table], ended: Callable[[], bool],
           interval: float, console: Console, sleep: Callable[[float], None] = time.sleep) -> RunMetrics:
    """Loads and shows the run until `ended()` says so (checked before each wait) or the user interrupts; returns
    the last load (the live table is cleared: the caller prints the final one). A load that fails keeps the last table and says why below it."""
    run = load()
    with Live(render(run), console=console, refresh_per_second=1, transient=True) as live:
        try:
            while not ended():
                sleep(interval)
                run = _reload(load, run, live, render)
        except KeyboardInterrupt:
            pass
    return run


def _reload(load, last: RunMetrics, live: Live, render) -> RunMetrics:
    from dapo_ops.errors import DapoError

    try:
        run = load()
    except DapoError as exc:
        live.console.print(f"report: {exc} (showing the last read)", markup=False, highlight=False)
        return last
    live.update(render(run))
    return run
