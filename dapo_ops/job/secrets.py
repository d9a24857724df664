"""The secrets a job gets: exactly the controller environment variables its spec lists under `secrets`, each read
from the environment or from a file the environment names (WANDB_API_KEY, or WANDB_API_KEY_FILE to keep the key out
of shell history and `ps`). A logger that needs one (wandb: WANDB_API_KEY) fails validation unless it is listed.

They reach the nodes only as 0600 files in the run's directory (cluster.push_files), and reach the job only as those
files' paths: Ray's runtime_env hands e.g. `NETRC=<path>` to the driver and to every worker of this job, verl's
TaskRunner included (where wandb.init runs), while `ray start` and the rehearsal never see a key. wandb reads its key
from `NETRC` for the machine of its base URL when WANDB_API_KEY is unset (wandb 0.23.1
wandb/sdk/lib/auth/authenticate.py, wbnetrc.py); huggingface_hub reads its token from the file HF_TOKEN_PATH names
when HF_TOKEN is unset (huggingface_hub 0.36.0 constants.py, utils/_auth.py `_get_token_from_file`). No key is ever in
a rendered file, a command line, a process environment or Ray's job metadata; the files go when `status` or `watch`
sees the job end, and with `stop` and a failed launch."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit

from dapo_ops.errors import UsageError
from dapo_ops.job.spec import JobSpec

# logger -> the environment variable it cannot run without
NEEDED_BY_LOGGER = {"wandb": "WANDB_API_KEY"}
WANDB_DEFAULT_BASE_URL = "https://api.wandb.ai"   # wandb's default when WANDB_BASE_URL is unset
NETRC_NAME = "wandb.netrc"                          # in the run's directory on every node
HF_TOKEN_NAME = "hf-token"
MAX_SECRET_FILE_BYTES = 4096


@dataclass(frozen=True)
class Delivery:
    file: str        # the 0600 file in the run's directory on every node
    variable: str    # the job's runtime_env variable naming that file, which the library reads


# The secrets dapo-ops can hand to a job, and how each reaches the library that reads it.
SECRETS = {"WANDB_API_KEY": Delivery(NETRC_NAME, "NETRC"), "HF_TOKEN": Delivery(HF_TOKEN_NAME, "HF_TOKEN_PATH")}
SECRET_FILES = tuple(d.file for d in SECRETS.values())


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


def check_secret_names(spec: JobSpec) -> list[str]:
    """The spec's `secrets` against what dapo-ops can hand over, and its loggers against `secrets` (pure)."""
    problems = [f"secrets: {name!r} is not a secret dapo-ops hands to a job ({', '.join(SECRETS)})"
                for name in spec.secrets if name not in SECRETS]
    problems += [f"secrets: {name} is listed twice" for name in sorted(set(spec.secrets))
                 if spec.secrets.count(name) > 1]
    problems += [f"trainer.loggers has {logger}, which needs {variable}: list it under secrets (the job gets only "
                 "the secrets its spec lists)" for logger, variable in NEEDED_BY_LOGGER.items()
                 if logger in loggers(spec) and variable not in spec.secrets]
    return problems


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
    """What keeps the job from getting its secrets, as messages (validate lists them with the other problems)."""
    environ = os.environ if environ is None else environ
    problems = check_secret_names(spec)
    for variable in spec.secrets:
        if variable not in SECRETS:
            continue
        try:
            if read_secret(variable, environ) is None:
                problems.append(f"secrets lists {variable}, which is not set in the environment "
                                f"(set it, or {variable}_FILE to a file holding it)")
        except SecretError as exc:
            problems.append(f"secrets: {exc}")
    return problems


def job_secrets(spec: JobSpec, environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """variable -> value for every secret the spec lists, None when it lists none."""
    environ = os.environ if environ is None else environ
    problems = check_secret_names(spec)
    if problems:
        raise SecretError(problems[0])
    found = {}
    for variable in spec.secrets:
        value = read_secret(variable, environ)
        if value is None:
            raise SecretError(f"secrets lists {variable}, which is not set in the environment")
        found[variable] = value
    return found or None


def secret_files(spec: JobSpec, secrets: Mapping[str, str]) -> dict[str, str]:
    """File name in the run's directory -> its content, for each secret the job gets."""
    files = {}
    for variable, value in secrets.items():
        files[SECRETS[variable].file] = netrc_text(spec, secrets) if variable == "WANDB_API_KEY" else value + "\n"
    return files


def runtime_env_paths(spec: JobSpec, node_dir: str) -> dict[str, str]:
    """The job's runtime_env variables naming its secret files (never a key)."""
    return {SECRETS[v].variable: f"{node_dir}/{SECRETS[v].file}" for v in spec.secrets if v in SECRETS}


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
