"""`python -m dapo_ops.cli`: the same as the `dapo-ops` script."""

import sys

from dapo_ops.cli import main

sys.exit(main())
