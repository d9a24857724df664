"""Click options shared by several commands, each declared once (pip-tools' scripts/options.py does the same)."""

from __future__ import annotations

import math
from pathlib import Path

import click

from dapo_ops.errors import UsageError

json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
inventory_option = click.option("-i", "--inventory", type=click.Path(path_type=Path),
                                help="Ansible inventory (default: DAPO_OPS_INVENTORY, else Ansible's configured one).")
job_file_argument = click.argument("job_file", type=click.Path(path_type=Path))
model_config_option = click.option(
    "--model-config", type=click.Path(path_type=Path),
    help="The model's config.json, when the controller cannot read model.path/config.json (the architecture).")
limit_option = click.option("--limit", metavar="PATTERN",
                            help="Only these hosts: names or glob patterns, comma-separated.")


def require_positive(**values: float | int | None) -> None:
    """One usage error for the first given option that is not a positive finite number (keyword names become
    --option-names): click's float type takes `nan` and `inf`, which would make a loop spin or overflow."""
    for name, value in values.items():
        if value is not None and not (0 < value < math.inf):
            raise UsageError(f"--{name.replace('_', '-')} must be a positive number")
