"""How a long command reports its steps: a start, progress notes, and an end with its time or its failure.
The launcher only calls `step()` and `note()`; the CLI decides how the events look (a rich spinner, plain lines)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Union


@dataclass(frozen=True)
class StepStarted:
    title: str


@dataclass(frozen=True)
class StepNote:
    title: str
    text: str


@dataclass(frozen=True)
class StepEnded:
    title: str
    ok: bool
    text: str | None      # what the step found, or why it failed
    seconds: float


StepEvent = Union[StepStarted, StepNote, StepEnded]
Sink = Callable[[StepEvent], None]


class StepHandle:
    def __init__(self) -> None:
        self.summary: str | None = None

    def done(self, summary: str) -> None:
        """What the step found, shown on its closing line."""
        self.summary = summary


class Steps:
    def __init__(self, sink: Sink | None = None):
        self.sink: Sink = sink or (lambda event: None)
        self.current: str | None = None
        self.seconds: dict[str, float] = {}

    @contextmanager
    def step(self, title: str) -> Iterator[StepHandle]:
        handle, started = StepHandle(), time.monotonic()
        self.current = title
        self.sink(StepStarted(title))
        try:
            yield handle
        except BaseException as exc:
            reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
            self.sink(StepEnded(title, False, reason, time.monotonic() - started))
            raise
        finally:
            self.current = None
        self.seconds[title] = time.monotonic() - started
        self.sink(StepEnded(title, True, handle.summary, self.seconds[title]))

    def note(self, text: str) -> None:
        self.sink(StepNote(self.current or "", text))
