"""Typed errors. The CLI maps them to exit codes in one place (dapo_ops.cli)."""

from __future__ import annotations


class DapoError(Exception):
    """Something that was checked or run failed (exit code 1)."""

    exit_code = 1


class UsageError(DapoError):
    """Bad input or usage; nothing was changed (exit code 2)."""

    exit_code = 2


class ManifestError(UsageError):
    """The stack manifest is missing or malformed."""


class InventoryError(UsageError):
    """The inventory is missing, malformed or does not describe what was asked."""


class ParseError(DapoError):
    """Output of a tool could not be parsed.

    Names the command and the line so a user can see what the tool printed.
    """

    def __init__(self, command: str, reason: str, line_no: int | None = None, line: str | None = None):
        self.command = command
        self.reason = reason
        self.line_no = line_no
        self.line = line
        where = f" at line {line_no}" if line_no is not None else ""
        shown = f": {line.strip()!r}" if line is not None else ""
        super().__init__(f"cannot parse `{command}` output{where}: {reason}{shown}")


class SSHError(DapoError):
    """A node could not be reached or refused us (unknown host key, auth, timeout)."""
