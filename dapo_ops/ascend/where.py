"""Where a parser is in a tool's output: the command, and the line once it reads one, for its ParseError."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from dapo_ops.errors import ParseError


@dataclass(frozen=True)
class Where:
    """The output of `command` as a whole (no line), or its line `line_no` (counted from 1) reading `line`."""

    command: str
    line_no: int | None = None
    line: str | None = None

    def at(self, line_no: int, line: str) -> Where:
        return Where(self.command, line_no, line)

    def fail(self, reason: str) -> NoReturn:
        """Raise ParseError: "cannot parse `command` output[ at line N]: reason[: 'the line']"."""
        raise ParseError(self.command, reason, self.line_no, self.line) from None

    def integer(self, value: str, what: str) -> int:
        """int(value); not an integer: ParseError "<what> is not an integer (<value>)"."""
        try:
            return int(value)
        except ValueError:
            self.fail(f"{what} is not an integer ({value!r})")
