"""The simulator's own error, mapped to an exit code by the product's one place (dapo_ops.cli.run), as a DapoError."""

from __future__ import annotations

from dapo_ops.errors import DapoError


class SimError(DapoError):
    """The simulated fleet could not be brought up, inspected or torn down."""
