"""What a string in a job spec may hold (pure). Every string field passes here on the way in, so nothing that
would break a rendered script or leak a secret reaches render, the Hydra overrides or a node:

- no control characters (newline, NUL, escape, DEL ...): they split a shell word or a Hydra override;
- no `${...}`: OmegaConf would resolve it when verl composes its configuration (`${oc.env:WANDB_API_KEY}` pulls
  a secret from the node's environment into a path or a log);
- names (the job, the experiment, environment variables) matched as a whole (`re.fullmatch`: a `$` anchor also
  matches before a trailing newline);
- environment variables that look like secrets are not job settings: they come from the controller's
  environment into the 0600 secrets.env (dapo_ops.job.secrets), never into env.sh.
"""

from __future__ import annotations

import re

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_INTERPOLATION = re.compile(r"\$\{")
_SECRET_WORDS = re.compile(r"(^|_)(API_?KEY|ACCESS_KEY|PRIVATE_KEY|SECRET_KEY|TOKEN|SECRET|PASSWORD|PASSWD|"
                           r"CREDENTIALS?)(_|$)")


def text_problem(value: str) -> str | None:
    """Why a string cannot be a job setting, or None."""
    bad = _CONTROL.search(value)
    if bad:
        return f"contains the control character {bad.group()!r} (a value is one line of printable text)"
    if _INTERPOLATION.search(value):
        return "contains '${', an OmegaConf interpolation verl would resolve on the nodes; write the value itself"
    return None


def is_name(value: str) -> bool:
    return NAME.fullmatch(value) is not None


def is_env_name(value: str) -> bool:
    return ENV_NAME.fullmatch(value) is not None


def looks_secret(env_name: str) -> bool:
    """An environment variable whose name says it holds a credential (WANDB_API_KEY, HF_TOKEN, ...)."""
    return _SECRET_WORDS.search(env_name) is not None
