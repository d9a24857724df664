"""The secrets a job needs, read on the controller from the environment or from a file the environment names
(WANDB_API_KEY, or WANDB_API_KEY_FILE to keep the key out of shell history and `ps`).

They reach the nodes only as a netrc file, mode 0600, in the run's directory (cluster.push_files), and reach the
job only as that file's path: Ray's runtime_env hands `NETRC=<path>` to the driver and to every worker of this job,
verl's TaskRunner included (where wandb.init runs), while `ray start` and the rehearsal never see the key. wandb
reads its key from `NETRC` for the machine of its base URL when WANDB_API_KEY is unset (wandb 0.23.1
wandb/sdk/lib/auth/authenticate.py, wbnetrc.py). The key is never in a rendered file, a command line, a process
environment or Ray's job metadata; `stop` and a failed launch delete the file."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit

from dapo_ops.errors import UsageError
from dapo_ops.job.spec import JobSpec

# logger -> the environment variable it cannot run without
NEEDED_BY_LOGGER = {"wandb": "WANDB_API_KEY"}
WANDB_DEFAULT_BASE_URL = "https://api.wandb.ai"   # wandb's default when WANDB_BASE_URL is unset
NETRC_NAME = "wandb.netrc"                          # in the run's directory on every node
MAX_SECRET_FILE_BYTES = 4096


class SecretError(UsageError):
    """A secret is missing, unreadable, shared with other users, or not one token."""


def loggers(spec: JobSpec) -> set[str]:
    """The job's loggers: trainer.loggers, and a `trainer.logger=[...]` among the extra overrides."""
    names = set(spec.trainer.loggers)
    for override in spec.extra_overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+~") == "trainer.logger":
            names |= {part.strip(" '\"") for part in value.strip("[]").split(",") if part.strip(" '\"")}
    return names


def needs_secrets(spec: JobSpec) -> bool:
    return bool(loggers(spec) & NEEDED_BY_LOGGER.keys())


def read_secret(variable: str, environ: Mapping[str, str]) -> str | None:
    """`variable`'s value, or the content of the file `<variable>_FILE` names (whitespace around it stripped);
    None when neither is set. A file must be a regular file no other user can read."""
    value, file_name = environ.get(variable), environ.get(f"{variable}_FILE")
    if value and file_name:
        raise SecretError(f"both {variable} and {variable}_FILE are set: keep one")
    if file_name:
        value = _read_secret_file(Path(file_name).expanduser(), f"{variable}_FILE")
    if not value:
        return None
    value = value.strip()
    if not value or any(c.isspace() or not c.isprintable() for c in value):
        raise SecretError(f"{variable}: the value is empty or holds whitespace or control characters; an API key "
                          "is one token")
    return value


def _read_secret_file(path: Path, what: str) -> str:
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise SecretError(f"{what}: {path} is not a regular file")
        if info.st_mode & 0o077:
            raise SecretError(f"{what}: {path} is readable by others (mode {stat.S_IMODE(info.st_mode):04o}): "
                              f"chmod 600 {path}")
        if info.st_size > MAX_SECRET_FILE_BYTES:
            raise SecretError(f"{what}: {path} is {info.st_size} bytes, not one key")
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SecretError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SecretError(f"{what}: {path} is not UTF-8 text") from None


def missing_secrets(spec: JobSpec, environ: Mapping[str, str] | None = None) -> list[str]:
    """What keeps the job's loggers from running, as messages (validate lists them with the other problems)."""
    environ = os.environ if environ is None else environ
    problems = []
    for logger, variable in NEEDED_BY_LOGGER.items():
        if logger not in loggers(spec):
            continue
        try:
            if read_secret(variable, environ) is None:
                problems.append(f"trainer.loggers has {logger} but {variable} is not set in the environment "
                                f"(set it, or {variable}_FILE to a file holding it)")
        except SecretError as exc:
            problems.append(f"trainer.loggers has {logger}: {exc}")
    return problems


def job_secrets(spec: JobSpec, environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """variable -> value for every secret the job's loggers need, None when it needs none."""
    environ = os.environ if environ is None else environ
    found = {}
    for logger, variable in NEEDED_BY_LOGGER.items():
        if logger in loggers(spec):
            value = read_secret(variable, environ)
            if value is None:
                raise SecretError(f"trainer.loggers has {logger} but {variable} is not set in the environment")
            found[variable] = value
    return found or None


def wandb_machine(spec: JobSpec) -> str:
    """The netrc machine wandb looks its key up under: the host[:port] of WANDB_BASE_URL (env.extra), else
    api.wandb.ai (wbnetrc.read_netrc_auth_with_source uses urlsplit(base_url).netloc)."""
    netloc = urlsplit(spec.env.extra.get("WANDB_BASE_URL", WANDB_DEFAULT_BASE_URL)).netloc
    if not netloc or any(c.isspace() for c in netloc):
        raise SecretError(f"env.extra.WANDB_BASE_URL: {spec.env.extra.get('WANDB_BASE_URL')!r} is not a URL "
                          "with a host")
    return netloc


def netrc_text(spec: JobSpec, secrets: Mapping[str, str]) -> str:
    """The netrc file that carries the key to wandb (Python's netrc module parses it, as wandb does)."""
    return f"machine {wandb_machine(spec)}\n  login user\n  password {secrets['WANDB_API_KEY']}\n"


def netrc_path(node_dir: str) -> str:
    return f"{node_dir}/{NETRC_NAME}"
