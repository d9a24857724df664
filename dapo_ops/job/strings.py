"""What a string in a job spec may hold (pure). Every string field passes here on the way in, so nothing that
would break a rendered script or leak a secret reaches render, the Hydra overrides or a node:

- no control characters (newline, NUL, escape, DEL ...): they split a shell word or a Hydra override;
- no `${...}`: OmegaConf would resolve it when verl composes its configuration (`${oc.env:WANDB_API_KEY}` pulls
  a secret from the node's environment into a path or a log);
- names (the job, the experiment, environment variables) matched as a whole (`re.fullmatch`: a `$` anchor also
  matches before a trailing newline);
- environment variables that look like secrets are not job settings: a job lists the secrets it gets (`secrets`),
  which come from the controller's environment into 0600 files (dapo_ops.job.secrets), never into env.sh;
- env.sh is sourced by root scripts (`ray start`, `nft`, `install`, `pgrep`), so a variable that changes what a
  program loads or runs (the dynamic loader's LD_*, bash's BASH_ENV and BASH_FUNC_*, PATH, the interpreters'
  PYTHONPATH, NODE_OPTIONS ...) is code, not a setting: refused;
- an endpoint that receives a secret (WANDB_BASE_URL gets the wandb key, HF_ENDPOINT the Hugging Face token) must
  be https://.
"""

from __future__ import annotations

import re

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_INTERPOLATION = re.compile(r"\$\{")
_SECRET_WORDS = re.compile(r"(^|_)(API_?KEY|ACCESS_KEY|PRIVATE_KEY|SECRET_KEY|TOKEN|SECRET|PASSWORD|PASSWD|"
                           r"CREDENTIALS?)(_|$)")


# What a root process would load or run because of it (ld.so(8), bash(1) INVOCATION, python(1), node(1) ...).
CODE_VARIABLES = frozenset({
    "PATH", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "IFS", "PS4", "PROMPT_COMMAND", "CDPATH", "GLOBIGNORE",
    "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONINSPECT", "PYTHONEXECUTABLE",
    "PERL5LIB", "PERL5OPT", "PERLLIB", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "NODE_PATH", "GCONV_PATH",
    "HOSTALIASES", "LOCPATH", "NLSPATH", "RESOLV_HOST_CONF", "MALLOC_CONF", "GIT_SSH", "GIT_SSH_COMMAND", "EDITOR",
    "PAGER", "SSH_ASKPASS", "TMPDIR",
})
CODE_PREFIXES = ("LD_", "BASH_FUNC_", "DYLD_")
# Endpoints the job sends a credential to: https only.
SECRET_ENDPOINTS = {"WANDB_BASE_URL": "the wandb key", "HF_ENDPOINT": "the Hugging Face token"}


def env_problem(name: str, value: str) -> str | None:
    """Why env.extra.NAME=VALUE cannot go into the environment root scripts source, or None."""
    if name in CODE_VARIABLES or name.startswith(CODE_PREFIXES):
        return (f"{name} changes what the root scripts that source env.sh load or run (ray start, nft, install): "
                "it is not a job setting")
    if name in SECRET_ENDPOINTS and not value.lower().startswith("https://"):
        return f"{value!r} is not an https:// URL, and {SECRET_ENDPOINTS[name]} is sent there"
    return None


def path_problem(value: str) -> str | None:
    """Why an absolute node path is refused, or None: a '..' segment walks out of where the path says it is."""
    if ".." in value.split("/"):
        return f"{value!r} has a '..' segment: write the path without it"
    return None


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
