"""SSH to fleet nodes through Fabric, with host keys verified.

Fabric accepts any host key by default (AutoAddPolicy, known_hosts ignored; fabric#2071). Every connection made
here loads the known_hosts file and sets paramiko's RejectPolicy before its first use, so an unknown or changed
host key is refused. Every command has a timeout; many hosts run in a bounded thread pool.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import paramiko
from fabric import Connection
from invoke.exceptions import CommandTimedOut

from dapo_ops.errors import SSHError


@dataclass(frozen=True)
class HostSpec:
    name: str
    address: str
    known_hosts: Path
    user: str = "root"
    port: int = 22
    key_file: Path | None = None
    connect_timeout: float = 10.0
    vars: dict = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class CommandResult:
    host: str
    command: str
    ok: bool
    exit_code: int | None
    stdout: str
    stderr: str
    seconds: float
    error: str | None = None  # set when the host could not be reached or the command timed out


def connect(host: HostSpec) -> Connection:
    """An opened Connection whose host key has been checked against host.known_hosts."""
    connect_kwargs = {"allow_agent": False, "look_for_keys": host.key_file is None, "banner_timeout": host.connect_timeout,
                      "auth_timeout": host.connect_timeout}
    if host.key_file is not None:
        connect_kwargs["key_filename"] = [str(host.key_file)]
    conn = Connection(host.address, user=host.user, port=host.port, connect_timeout=host.connect_timeout,
                      connect_kwargs=connect_kwargs)
    try:
        conn.client.load_host_keys(str(host.known_hosts))
    except OSError as exc:
        raise SSHError(f"{host.name}: cannot read known_hosts {host.known_hosts}: {exc.strerror}") from None
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        conn.open()
    except paramiko.BadHostKeyException:
        raise SSHError(f"{host.name} ({host.address}): host key does not match {host.known_hosts} — refusing "
                       "to connect (possible man-in-the-middle, or the node was reinstalled)") from None
    except paramiko.SSHException as exc:
        message = str(exc)
        if "not found in known_hosts" in message:
            raise SSHError(f"{host.name} ({host.address}): host key not in {host.known_hosts} — refusing to "
                           "connect") from None
        raise SSHError(f"{host.name} ({host.address}): SSH failed: {message}") from None
    except (socket.timeout, TimeoutError):
        raise SSHError(f"{host.name} ({host.address}): connection timed out after {host.connect_timeout:.0f} s") from None
    except OSError as exc:
        raise SSHError(f"{host.name} ({host.address}): cannot connect: {exc.strerror or exc}") from None
    return conn


def run(conn: Connection, host: HostSpec, command: str, timeout: float) -> CommandResult:
    started = time.monotonic()
    try:
        result = conn.run(command, hide=True, warn=True, timeout=timeout, in_stream=False)
    except CommandTimedOut:
        return CommandResult(host.name, command, False, None, "", "", time.monotonic() - started,
                             f"timed out after {timeout:.0f} s")
    except (paramiko.SSHException, OSError, EOFError) as exc:
        return CommandResult(host.name, command, False, None, "", "", time.monotonic() - started,
                             f"connection lost: {exc}")
    return CommandResult(host.name, command, result.exited == 0, result.exited, result.stdout, result.stderr,
                         time.monotonic() - started)


def run_on(host: HostSpec, command: str, timeout: float = 60) -> CommandResult:
    """Connect, run one command, close. An unreachable host becomes a result with `error` set."""
    started = time.monotonic()
    try:
        conn = connect(host)
    except SSHError as exc:
        return CommandResult(host.name, command, False, None, "", "", time.monotonic() - started, str(exc))
    try:
        return run(conn, host, command, timeout)
    finally:
        conn.close()
