"""How commands speak: rich for people (stderr when --json is given), one JSON document for machines."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

err_console = Console(stderr=True)


class Output:
    """Where a command speaks: rich for people, one JSON document for machines."""

    def __init__(self, as_json: bool):
        self.as_json = as_json
        self.console = err_console if as_json else Console()

    # Every message is shown literally: user text (job names, paths, node output) never goes through rich markup,
    # where a '[' would be read as a tag or end in a MarkupError.
    def info(self, message: str) -> None:
        self.console.print(Text(message), highlight=False, soft_wrap=True)

    def success(self, message: str) -> None:
        self.console.print(Text(message, style="green"), highlight=False, soft_wrap=True)

    def note(self, message: str) -> None:
        """A progress line, dimmed."""
        self.console.print(Text(message, style="dim"), highlight=False, soft_wrap=True)

    def warning(self, message: str) -> None:
        self.console.print(Text.assemble(("warning:", "yellow"), " ", message), highlight=False, soft_wrap=True)

    def table(self, table: Table) -> None:
        """A table for people; --json leaves it out (the document carries the same data)."""
        if not self.as_json:
            self.console.print(table)

    def document(self, data: Any) -> None:
        if self.as_json:
            click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def as_dict(record: Any) -> dict:
    return dataclasses.asdict(record)


def print_error(message: str) -> None:
    err_console.print(message, highlight=False, soft_wrap=True, markup=False)


class StepPrinter:
    """Launch steps through rich: a spinner with the running step and its latest note on a terminal, one line per
    step start, note and end otherwise (logs, CI); each step's closing line carries its time."""

    def __init__(self, console: Console):
        self.console = console
        self.live = console.is_terminal
        self.status = None
        self.title = ""

    def __call__(self, event) -> None:
        from dapo_ops.launch.steps import StepNote, StepStarted

        if isinstance(event, StepStarted):
            self._started(event.title)
        elif isinstance(event, StepNote):
            self._note(event.text)
        else:
            self._ended(event.title, event.ok, event.text, event.seconds)

    def _print(self, markup: str) -> None:
        self.console.print(markup, highlight=False, soft_wrap=True)

    def _started(self, title: str) -> None:
        self.title = title
        if self.live:
            self.status = self.console.status(escape(title))
            self.status.start()
        else:
            self._print(f"[dim]… {escape(title)}[/dim]")

    def _note(self, text: str) -> None:
        if self.status is not None:
            self.status.update(f"{escape(self.title)} — {escape(text)}")
        else:
            self._print(f"[dim]  {escape(text)}[/dim]")

    def _ended(self, title: str, ok: bool, text: str | None, seconds: float) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None
        mark = "[green]✓[/green]" if ok else "[red]✗[/red]"
        detail = f" — {escape(text)}" if text else ""
        self._print(f"{mark} {escape(title)}{detail} [dim]({seconds:.1f} s)[/dim]")
