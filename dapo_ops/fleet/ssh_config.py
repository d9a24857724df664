"""A host's SSH settings read as Ansible's ssh connection hands them to OpenSSH, so that one set of inventory
variables serves Ansible and dapo-ops' own SSH (paramiko through Fabric) alike.

What is read, and in which order (OpenSSH keeps the first value it obtains for an option, ssh_config(5); Ansible's
command line, ansible-core's ansible/plugins/connection/ssh.py `_build_command`, puts its own variables before
ansible_ssh_common_args and ansible_ssh_extra_args; the config file comes last):

1. ansible_host, ansible_user, ansible_port, ansible_ssh_private_key_file;
2. the OpenSSH options in ansible_ssh_common_args, then ansible_ssh_extra_args: `-o Key=Value` for HostName,
   User, Port, IdentityFile, UserKnownHostsFile, ProxyJump and ProxyCommand, and `-F FILE`, `-J JUMPS`, `-l USER`,
   `-p PORT`, `-i KEY`;
3. the ssh config file: `-F FILE`, else ~/.ssh/config (paramiko's parser; Host and Match blocks as OpenSSH applies
   them).

ProxyJump is the way to a node behind a jump host (`[user@]host[:port]`, a chain as `a,b`, or an alias of the config
file); each jump host takes its own user, port, key and known_hosts from the config file, as OpenSSH's `ssh -W`
does for it (OpenSSH's ssh.c turns ProxyJump into a ProxyCommand that passes -F on, not the -o options), and its
host key is checked like a node's. ProxyCommand is refused: it is a command line taken from the inventory, run on
the controller.

ansible_become (with ansible_become_user, default root; ansible_become_method sudo, the default) makes dapo-ops run
every node command through `sudo -n`, as Ansible's become does for the roles: the login user needs sudo without a
password (dapo-ops asks for none and keeps none).
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import paramiko

from dapo_ops.errors import InventoryError
from dapo_ops.model.values import ansible_bool

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
USER_CONFIG = "~/.ssh/config"
# the inventory variables read here, besides the hosts' addresses
ARGS_VARS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")
BECOME_VARS = ("ansible_become", "ansible_become_user", "ansible_become_method")
# OpenSSH's command-line flags that take an argument (ssh(1)); those not read here are skipped with theirs
_FLAGS_WITH_ARGUMENT = set("BbcDEeFIiJLlmOopQRSWw")
# what OpenSSH 9.6+ accepts as a host name on its command line: no shell metacharacters (paramiko's %h would pass them)
_HOST_NAME = re.compile(r"[A-Za-z0-9._:%\[\]-]+")
_READ_OPTIONS = ("hostname", "user", "port", "identityfile", "userknownhostsfile", "proxyjump", "proxycommand")


@dataclass(frozen=True)
class Endpoint:
    """Where one SSH hop goes and how it is checked and authenticated."""

    address: str
    user: str
    port: int
    key_file: Path | None
    known_hosts: Path


@dataclass(frozen=True)
class SshSettings:
    target: Endpoint
    jumps: tuple[Endpoint, ...] = ()   # in the order they are passed through
    become_user: str | None = None     # None: commands run as the login user


def _words(args: str, where: str) -> list[tuple[str, str]]:
    """(flag, value) for each flag of ssh(1)'s command line that takes a value, as ssh's getopt reads them: flags may
    be clustered (`-vJ bastion`, `-Cp2222`), the value in the same word or the next."""
    try:
        words = shlex.split(args)
    except ValueError as exc:
        raise InventoryError(f"{where}: its SSH arguments do not parse ({exc}): {args!r}") from None
    found = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if not word.startswith("-") or len(word) < 2:
            continue
        for position, flag in enumerate(word[1:], 1):
            if flag not in _FLAGS_WITH_ARGUMENT:
                continue
            value = word[position + 1:]
            if not value:
                if index >= len(words):
                    raise InventoryError(f"{where}: its SSH arguments end with {word} and no value")
                value = words[index]
                index += 1
            found.append((flag, value))
            break
    return found


def command_line_options(args: str, where: str) -> tuple[dict[str, str], Path | None]:
    """The options the inventory's OpenSSH arguments set (first value wins, keys lower-cased, in the order they
    came) and the -F file (the last one, as ssh takes it) (pure)."""
    options: dict[str, str] = {}
    config_file: Path | None = None
    flags = {"J": "proxyjump", "l": "user", "p": "port", "i": "identityfile"}
    for flag, value in _words(args, where):
        if flag == "o":
            key, _, option_value = value.replace("=", " ", 1).partition(" ")
            options.setdefault(key.strip().lower(), option_value.strip())
        elif flag == "F":
            config_file = Path(os.path.expanduser(value))
        elif flag in flags:
            options.setdefault(flags[flag], value)
    return options, config_file


_parsed: dict[tuple[str, int], paramiko.SSHConfig] = {}
# What an ssh config file may hold that dapo-ops does not follow: `Match exec` runs a command line when paramiko
# looks a host up (dapo-ops reads inventory values as data: nothing in them runs on the controller), and paramiko
# skips Include, which would leave the settings of the included files out without a word.
_REFUSED_CONFIG = re.compile(r"^\s*(match\b.*\bexec\b|include\b)", re.IGNORECASE | re.MULTILINE)


def load_config(path: Path | None) -> paramiko.SSHConfig:
    """The ssh config file OpenSSH would read: -F's (which must exist), else ~/.ssh/config when there is one. Parsed
    once per file version (an inventory's hosts share it)."""
    if path is None:
        user_config = Path(os.path.expanduser(USER_CONFIG))
        if not user_config.is_file():
            return paramiko.SSHConfig()
        path = user_config
    try:
        key = (str(path), path.stat().st_mtime_ns)
        if key not in _parsed:
            text = path.read_text()
            refused = _REFUSED_CONFIG.search(text)
            if refused:
                raise InventoryError(f"the ssh config file {path} has `{refused.group(0).strip()[:60]}`, which "
                                     "dapo-ops does not follow (Match exec runs a command on the controller; Include "
                                     "is not read): give dapo-ops and Ansible a file without it with -F")
            _parsed[key] = paramiko.SSHConfig.from_text(text)
        return _parsed[key]
    except OSError as exc:
        raise InventoryError(f"the ssh config file {path} does not read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InventoryError(f"the ssh config file {path} is not text") from None
    except InventoryError:
        raise
    except Exception as exc:  # paramiko's parser raises bare exceptions for bad lines
        raise InventoryError(f"the ssh config file {path} does not parse: {exc}") from None


def _known_hosts(value: str | None, where: str) -> Path:
    files = shlex.split(value) if value else [DEFAULT_KNOWN_HOSTS]
    if len(files) != 1:
        raise InventoryError(f"{where}: UserKnownHostsFile names {len(files)} files; dapo-ops reads one")
    return Path(os.path.expanduser(files[0]))


def _port(value: object, where: str) -> int:
    try:
        port = int(str(value))
    except ValueError:
        raise InventoryError(f"{where}: the SSH port {value!r} (ansible_port, -p or Port) is not a number") from None
    if not 0 < port < 65536:
        raise InventoryError(f"{where}: the SSH port {port} is out of range")
    return port


def _first_key(value) -> str | None:
    if isinstance(value, list):
        return value[0] if value else None
    return value or None


def _jump(spec: str, config: paramiko.SSHConfig, where: str) -> Endpoint:
    """One ProxyJump entry, `[user@]host[:port]` or `ssh://[user@]host[:port]`, with what the config says of host."""
    text = spec.removeprefix("ssh://")
    user, _, rest = text.rpartition("@")
    host, port = rest, ""
    if rest.startswith("["):                               # [v6 address]:port
        host, _, tail = rest[1:].partition("]")
        port = tail.removeprefix(":")
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    if not host:
        raise InventoryError(f"{where}: ProxyJump entry {spec!r} names no host")
    found = config.lookup(host)
    if (_first_key(found.get("proxyjump")) or "none").lower() != "none":
        raise InventoryError(f"{where}: jump host {host} has a ProxyJump of its own in the ssh config; write the "
                             f"chain in one ProxyJump (first,second)")
    key = _first_key(found.get("identityfile"))
    return Endpoint(address=found.get("hostname", host), user=user or found.get("user") or getpass.getuser(),
                    port=_port(port or found.get("port", 22), where),
                    key_file=Path(os.path.expanduser(key)) if key else None,
                    known_hosts=_known_hosts(found.get("userknownhostsfile"), where))


def _first(*values):
    """The first value set (OpenSSH keeps the first value it obtains for an option)."""
    return next((v for v in values if v not in (None, "")), None)


def _merged_options(address: str, host_vars: dict, where: str,
                    config_loader: Callable[[Path | None], paramiko.SSHConfig]) -> tuple[dict, paramiko.SSHConfig]:
    """The -o options of the inventory's arguments, then what the config file says of the host; and that file."""
    args = " ".join(str(host_vars.get(var) or "") for var in ARGS_VARS)
    options, config_file = command_line_options(args, where)
    config = config_loader(config_file)
    for key, value in config.lookup(address).items():
        if key in _READ_OPTIONS:
            options.setdefault(key, _first_key(value) or "")
    return options, config


def ssh_settings(name: str, host_vars: dict,
                 config_loader: Callable[[Path | None], paramiko.SSHConfig] = load_config) -> SshSettings:
    """The host's SSH settings from its inventory variables and the ssh config file; InventoryError naming the host
    and the setting for one dapo-ops cannot follow."""
    where = f"host {name!r}"
    address = str(_first(host_vars.get("ansible_host"), host_vars.get("ansible_ssh_host"), name))
    if not _HOST_NAME.fullmatch(address):
        raise InventoryError(f"{where}: the address {address!r} is not a host name or IP address")
    options, config = _merged_options(address, host_vars, where, config_loader)
    # ProxyJump and ProxyCommand exclude each other: OpenSSH keeps whichever it obtains first
    proxy = next((k for k in options if k in ("proxyjump", "proxycommand")), None)
    jump_spec = options["proxyjump"] if proxy == "proxyjump" else "none"
    if proxy == "proxycommand" and options["proxycommand"].lower() != "none":
        raise InventoryError(f"{where}: ProxyCommand is not followed by dapo-ops (a command line from the inventory "
                             "or ssh config, run on the controller): reach the node with ProxyJump")
    key = _first(host_vars.get("ansible_ssh_private_key_file"), host_vars.get("ansible_private_key_file"),
                 options.get("identityfile"))
    target = Endpoint(
        address=options.get("hostname") or address,
        user=str(_first(host_vars.get("ansible_user"), host_vars.get("ansible_ssh_user"), options.get("user"),
                        getpass.getuser())),
        port=_port(_first(host_vars.get("ansible_port"), host_vars.get("ansible_ssh_port"), options.get("port"), 22),
                   where),
        key_file=Path(os.path.expanduser(str(key))) if key else None,
        known_hosts=_known_hosts(options.get("userknownhostsfile"), where))
    jumps = () if jump_spec.lower() == "none" else tuple(
        _jump(entry.strip(), config, where) for entry in jump_spec.split(",") if entry.strip())
    return SshSettings(target, jumps, _become_user(host_vars, where))


def _become_user(host_vars: dict, where: str) -> str | None:
    if not ansible_bool(host_vars.get("ansible_become"), "ansible_become", False, where):
        return None
    method = str(host_vars.get("ansible_become_method") or "sudo")
    if method != "sudo":
        raise InventoryError(f"{where}: ansible_become_method is {method!r}; dapo-ops runs node commands through "
                             "sudo only")
    return str(host_vars.get("ansible_become_user") or "root")


def as_become_user(command: str, become_user: str | None) -> str:
    """The shell command line that runs `command` as become_user through sudo (unchanged without become): -n, so a
    sudo that wants a password fails at once instead of waiting for one nobody types; bash, the shell a root
    login on these nodes runs commands with."""
    if become_user is None:
        return command
    return f"sudo -n -H -u {shlex.quote(become_user)} -- /bin/bash -c {shlex.quote(command)}"


SUDO_NEEDS_PASSWORD = "a password is required"
