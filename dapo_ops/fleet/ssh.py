"""SSH to fleet nodes through Fabric, with host keys verified.

Fabric accepts any host key by default (AutoAddPolicy, known_hosts ignored; fabric#2071). Every connection made
here loads the known_hosts file and sets paramiko's RejectPolicy before its first use, so an unknown or changed
host key is refused. Every command has a timeout; many hosts run in a bounded thread pool.
"""

from __future__ import annotations

import enum
import queue
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Generic, TypeVar

import paramiko
from fabric import Connection
from invoke.exceptions import CommandTimedOut

from dapo_ops.errors import DapoError, SSHError
from dapo_ops.fleet import known_hosts

T = TypeVar("T")


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


class Failure(enum.Enum):
    """Why a command has no exit code, decided where the exception is caught (never by matching messages)."""

    UNREACHABLE = "unreachable"          # no connection: network, host key, authentication
    TIMED_OUT = "timed out"              # the command outlived its timeout (it may still run on the node)
    CONNECTION_LOST = "connection lost"  # the connection dropped while the command ran


@dataclass(frozen=True)
class CommandResult:
    """One command on one host. Either it ran (failure is None, exit_code set) or it did not (failure and error
    say why). Callers that need it to have worked call raise_for()."""

    host: str
    command: str
    exit_code: int | None
    stdout: str
    stderr: str
    seconds: float
    failure: Failure | None = None
    error: str | None = None

    def raise_for(self, step: str, error: type[DapoError] = SSHError) -> str:
        """The command's stdout, or `error` naming the step, the host and why: no answer, or a non-zero exit with
        the last lines it printed."""
        if self.failure is not None:
            raise error(f"{step} on {self.host}: {self.error}")
        if self.exit_code != 0:
            tail = (self.stderr.strip() or self.stdout.strip()).splitlines()[-3:]
            raise error(f"{step} on {self.host} failed (exit {self.exit_code}): {' | '.join(tail)}")
        return self.stdout


def connection(host: HostSpec) -> Connection:
    """A Connection (not opened) that offers no agent key and forwards no agent, whatever the operator's
    ~/.ssh/config says (Fabric reads it: `ForwardAgent yes` there would hand root job code on a node the agent)."""
    connect_kwargs = {"allow_agent": False, "look_for_keys": host.key_file is None, "banner_timeout": host.connect_timeout,
                      "auth_timeout": host.connect_timeout}
    if host.key_file is not None:
        connect_kwargs["key_filename"] = [str(host.key_file)]
    return Connection(host.address, user=host.user, port=host.port, connect_timeout=host.connect_timeout,
                      connect_kwargs=connect_kwargs, forward_agent=False)


def connect(host: HostSpec) -> Connection:
    """An opened Connection whose host key has been checked against host.known_hosts."""
    conn = connection(host)
    try:
        known = known_hosts.load_into(conn.client, host.known_hosts)
    except SSHError as exc:
        raise SSHError(f"{host.name}: {exc}") from None
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        conn.open()
    except paramiko.BadHostKeyException:
        raise SSHError(f"{host.name} ({host.address}): host key does not match {host.known_hosts} — refusing "
                       "to connect (possible man-in-the-middle, or the node was reinstalled)") from None
    except paramiko.SSHException as exc:
        message = str(exc)
        if "not found in known_hosts" in message:
            ca = (" (its @cert-authority lines are not used: paramiko cannot check host certificates; list the "
                  "host's key)") if known.cert_authorities else ""
            raise SSHError(f"{host.name} ({host.address}): host key not in {host.known_hosts}{ca} — refusing to "
                           "connect") from None
        raise SSHError(f"{host.name} ({host.address}): SSH failed: {message}") from None
    except (socket.timeout, TimeoutError):
        raise SSHError(f"{host.name} ({host.address}): connection timed out after {host.connect_timeout:.0f} s") from None
    except OSError as exc:
        raise SSHError(f"{host.name} ({host.address}): cannot connect: {exc.strerror or exc}") from None
    try:
        known_hosts.check_not_revoked(conn.client.get_transport().get_remote_server_key(), known,
                                      f"{host.name} ({host.address})", host.known_hosts)
    except SSHError:
        conn.close()
        raise
    return conn


def run(conn: Connection, host: HostSpec, command: str, timeout: float) -> CommandResult:
    started = time.monotonic()
    try:
        result = conn.run(command, hide=True, warn=True, timeout=timeout, in_stream=False)
    except CommandTimedOut:
        return CommandResult(host.name, command, None, "", "", time.monotonic() - started, Failure.TIMED_OUT,
                             f"timed out after {timeout:.0f} s")
    except (paramiko.SSHException, OSError, EOFError) as exc:
        return CommandResult(host.name, command, None, "", "", time.monotonic() - started, Failure.CONNECTION_LOST,
                             f"connection lost: {exc}")
    return CommandResult(host.name, command, result.exited, result.stdout, result.stderr, time.monotonic() - started)


# How long one command over SSH may take, by what it does (seconds); every caller names one of these.
PROBE = 15       # a look at a running run's node (watch, every few seconds)
QUICK = 30       # read or write a few files, a pgrep, an nft call, a lock
COMMAND = 60     # stop Ray, run a script, a Ray CLI call
TRANSFER = 120   # copy a log back, submit a job


def run_on(host: HostSpec, command: str, timeout: float = COMMAND) -> CommandResult:
    """Connect, run one command, close. An unreachable host becomes a result with `error` set."""
    started = time.monotonic()
    try:
        conn = connect(host)
    except SSHError as exc:
        return CommandResult(host.name, command, None, "", "", time.monotonic() - started, Failure.UNREACHABLE, str(exc))
    try:
        return run(conn, host, command, timeout)
    finally:
        conn.close()


@dataclass(frozen=True)
class FanOut(Generic[T]):
    results: dict[str, T]      # host name -> what the work returned, in host order; a host not done is missing
    interrupted: bool = False  # Ctrl-C came first (only when asked for partial results)


def fan_out(hosts: list[HostSpec], work: Callable[[HostSpec], T], *, max_workers: int = 32,
            deadline: float | None = None, on_done: Callable[[str, T], None] | None = None,
            partial_on_interrupt: bool = False) -> FanOut[T]:
    """work(host) for every host at once (at most max_workers at a time), on daemon threads: a host stuck in its
    connect cannot hold the caller. Returns when every host is done or the monotonic deadline passed. An exception
    from work is raised here at once (the other hosts' threads are left to finish on their own); so is Ctrl-C,
    unless partial_on_interrupt, which returns what was done so far."""
    done: queue.Queue = queue.Queue()
    slots = threading.BoundedSemaphore(max(1, max_workers))

    def run(host: HostSpec) -> None:
        with slots:
            try:
                done.put((host.name, work(host), None))
            except BaseException as exc:  # handed to the caller's thread
                done.put((host.name, None, exc))

    for host in hosts:
        threading.Thread(target=run, args=(host,), name=f"fan-out-{host.name}", daemon=True).start()
    got: dict[str, T] = {}
    interrupted = False
    try:
        while len(got) < len(hosts):
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                break
            try:
                name, value, exc = done.get(timeout=wait)
            except queue.Empty:
                break
            if exc is not None:
                raise exc
            got[name] = value
            if on_done is not None:
                on_done(name, value)
    except KeyboardInterrupt:
        if not partial_on_interrupt:
            raise
        interrupted = True
    return FanOut({h.name: got[h.name] for h in hosts if h.name in got}, interrupted)
