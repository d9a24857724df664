"""`dapo-ops runs`' table: one row per run record, the reason given what is left of the line."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text


def _saved_cell(record) -> str:
    """The last complete checkpoint step as `status` or `watch` last read it on the nodes."""
    step = (record.saved or {}).get("last_complete")
    return "" if not record.saved else ("none" if step is None else f"step {step}")


def _reason_cell(record) -> str:
    resumed = f"resumes {record.resumed_from} from step {record.resume_step}" if record.resumed_from else ""
    return "; ".join(part for part in (resumed, record.reason or "") if part)


COLUMNS = ("state", "run", "nodes", "checkpoint")


def runs_table(records: list, width: int) -> Table:
    rows = [(r.state, r.run_id, ",".join(r.nodes), _saved_cell(r), _reason_cell(r)) for r in records]
    table = Table(title="runs", box=box.SIMPLE_HEAD, padding=(0, 1))
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(len(COLUMNS))]
    for index, name in enumerate(COLUMNS):  # never shortened: the reason gives way
        table.add_column(name, no_wrap=True, min_width=max(widths[index], len(name)))
    # what is left of the line (rich drops no_wrap columns that do not fit); `runs --json` has the whole reason
    left = width - sum(max(w, len(name)) for w, name in zip(widths, COLUMNS)) - (len(COLUMNS) + 1) * 2 - 2
    table.add_column("reason", no_wrap=True, overflow="ellipsis", max_width=max(left, 6))
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # run ids and reasons are shown literally
    return table
