"""dapo-ops: provision, audit and launch verl DAPO on Ascend 910B fleets."""

__version__ = "0.1.0"
