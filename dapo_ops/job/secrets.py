"""The secrets a job needs from the controller's environment. They reach the nodes only in secrets.env (0600),
never a rendered file, a command line or a log."""

from __future__ import annotations

import os
from typing import Mapping

from dapo_ops.job.spec import JobSpec

# logger -> the environment variable it cannot run without
NEEDED_BY_LOGGER = {"wandb": "WANDB_API_KEY"}


def missing_secrets(spec: JobSpec, environ: Mapping[str, str] | None = None) -> list[str]:
    environ = os.environ if environ is None else environ
    return [f"trainer.loggers has {logger} but {variable} is not set in the environment"
            for logger, variable in NEEDED_BY_LOGGER.items()
            if logger in spec.trainer.loggers and not environ.get(variable)]


def job_secrets(spec: JobSpec, environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    environ = os.environ if environ is None else environ
    found = {variable: environ[variable] for logger, variable in NEEDED_BY_LOGGER.items()
             if logger in spec.trainer.loggers and environ.get(variable)}
    return found or None
