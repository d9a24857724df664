"""Where the project's files live (a dapo-ops checkout: stack/, inventory/, templates/, playbooks/)."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(os.environ.get("DAPO_OPS_ROOT") or Path(__file__).resolve().parent.parent)
STACK_MANIFEST = PROJECT_ROOT / "stack" / "manifest.yml"
INVENTORY_DIR = PROJECT_ROOT / "inventory"
