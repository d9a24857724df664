"""`python -m dapo_sim`: the same as the `dapo-sim` command."""

import sys

from dapo_sim.cli import main

sys.exit(main())
