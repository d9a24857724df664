"""How a long command reports its steps: a start, progress notes, and an end with its time or its failure.
The launcher only calls `step()` and `note()`; the CLI decides how that looks (a rich spinner, plain lines)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

# (kind, title, text, seconds): kind is start, note, done or fail
Sink = Callable[[str, str, str | None, float | None], None]


class StepHandle:
    def __init__(self) -> None:
        self.summary: str | None = None

    def done(self, summary: str) -> None:
        """What the step found, shown on its closing line."""
        self.summary = summary


class Steps:
    def __init__(self, sink: Sink | None = None):
        self.sink: Sink = sink or (lambda kind, title, text, seconds: None)
        self.current: str | None = None
        self.seconds: dict[str, float] = {}

    @contextmanager
    def step(self, title: str) -> Iterator[StepHandle]:
        handle, started = StepHandle(), time.monotonic()
        self.current = title
        self.sink("start", title, None, None)
        try:
            yield handle
        except BaseException as exc:
            reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
            self.sink("fail", title, reason, time.monotonic() - started)
            raise
        finally:
            self.current = None
        self.seconds[title] = time.monotonic() - started
        self.sink("done", title, handle.summary, self.seconds[title])

    def note(self, text: str) -> None:
        self.sink("note", self.current or "", text, None)
