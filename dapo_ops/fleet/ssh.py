"""SSH to fleet nodes through Fabric, with host keys verified.

Fabric accepts any host key by default (AutoAddPolicy, known_hosts ignored; fabric#2071). Every connection made
here, to a node or to a jump host on the way, loads the known_hosts file and sets paramiko's RejectPolicy before
its first use, so an unknown or changed host key is refused. Keys come from the inventory's key file or from
ssh-agent (for authentication only: the agent is never forwarded). Where and how to connect is read from the
inventory as Ansible reads it (ssh_config.py); with become, every command runs through sudo (files too:
transfer.py). Every command has a timeout; many hosts run in a bounded thread pool.
"""

from __future__ import annotations

import enum
import logging
import queue
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Generic, TypeVar

import paramiko
from fabric import Config, Connection
from invoke.exceptions import CommandTimedOut

from dapo_ops.errors import DapoError, SSHError
from dapo_ops.fleet import known_hosts
from dapo_ops.fleet.ssh_config import SUDO_NEEDS_PASSWORD, Endpoint, as_become_user

T = TypeVar("T")
# paramiko logs a failed handshake ("Error reading SSH protocol banner") with its traceback from its transport
# thread; with no handler anywhere Python prints it on stderr (logging.lastResort). Every such failure reaches the
# caller as an SSHError or a CommandResult, so the log adds nothing but noise on a live screen.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


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
    jumps: tuple[Endpoint, ...] = ()   # ProxyJump hosts, in the order they are passed through
    become_user: str | None = None     # run every command as this user through sudo (ansible_become)

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.address, self.user, self.port, self.key_file, self.known_hosts)

    def command(self, command: str) -> str:
        """The command line that runs `command` on this host as the user it is run as (through sudo with
        become)."""
        return as_become_user(command, self.become_user)


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


# Fabric would read the operator's ssh config itself and apply some of it (ProxyJump among others, unchecked): the
# inventory's settings, read as Ansible reads them, are the ones used. Each Connection gets a clone: a Connection
# writes attributes it does not declare into its config, and invoke re-merges a config on each write (emptying it
# first), so one config shared by the threads of a fan-out was seen empty by the others ("No attribute or config key
# found for 'connect_kwargs'", a launch on the 2 x 8 fleet in CI).
_FABRIC_CONFIG = Config(overrides={"load_ssh_configs": False})


def connection(endpoint: Endpoint, timeout: float, sock=None) -> Connection:
    """A Connection (not opened) that takes keys from the key file or ssh-agent and forwards no agent, whatever the
    operator's ~/.ssh/config says (`ForwardAgent yes` there would hand root job code on a node the agent); `sock`,
    a channel through a jump host."""
    connect_kwargs = {"allow_agent": True, "look_for_keys": endpoint.key_file is None, "banner_timeout": timeout,
                      "auth_timeout": timeout}
    if endpoint.key_file is not None:
        connect_kwargs["key_filename"] = [str(endpoint.key_file)]
    if sock is not None:
        connect_kwargs["sock"] = sock
    return Connection(endpoint.address, user=endpoint.user, port=endpoint.port, connect_timeout=timeout,
                      connect_kwargs=connect_kwargs, forward_agent=False, gateway=False,
                      config=_FABRIC_CONFIG.clone())


def _through(gateway: Connection | None, endpoint: Endpoint, timeout: float):
    """A direct-tcpip channel to the endpoint through the jump connection, opened within the timeout (Fabric's own
    gateway opens it with paramiko's default of an hour); None without a jump."""
    if gateway is None:
        return None
    try:
        return gateway.transport.open_channel("direct-tcpip", (endpoint.address, endpoint.port), ("", 0),
                                              timeout=timeout)
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise SSHError(f"{endpoint.address}:{endpoint.port}: the jump host cannot reach it: {exc}") from None


def _open(label: str, endpoint: Endpoint, timeout: float, gateway: Connection | None = None) -> Connection:
    """An opened Connection to one hop whose host key has been checked against its known_hosts."""
    where = f"{label} ({endpoint.address})"
    try:
        sock = _through(gateway, endpoint, timeout)
    except SSHError as exc:
        raise SSHError(f"{label}: {exc}") from None
    conn = connection(endpoint, timeout, sock)
    try:
        known = known_hosts.load_into(conn.client, endpoint.known_hosts)
    except SSHError as exc:
        raise SSHError(f"{label}: {exc}") from None
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        conn.open()
    except paramiko.BadHostKeyException:
        raise SSHError(f"{where}: host key does not match {endpoint.known_hosts} — refusing to connect (possible "
                       "man-in-the-middle, or the host was reinstalled)") from None
    except paramiko.PasswordRequiredException:
        raise SSHError(f"{where}: the key {endpoint.key_file} has a passphrase and ssh-agent offers no key the "
                       f"host takes: add it to the agent (ssh-add {endpoint.key_file}; SSH_AUTH_SOCK set)") from None
    except paramiko.AuthenticationException:
        raise SSHError(f"{where}: {endpoint.user} was not let in with the key "
                       f"{endpoint.key_file or 'files of ~/.ssh'} or ssh-agent's keys") from None
    except paramiko.SSHException as exc:
        message = str(exc)
        if "not found in known_hosts" in message:
            ca = (" (its @cert-authority lines are not used: paramiko cannot check host certificates; list the "
                  "host's key)") if known.cert_authorities else ""
            raise SSHError(f"{where}: host key not in {endpoint.known_hosts}{ca} — refusing to connect") from None
        raise SSHError(f"{where}: SSH failed: {message}") from None
    except (socket.timeout, TimeoutError):
        raise SSHError(f"{where}: connection timed out after {timeout:.0f} s") from None
    except OSError as exc:
        raise SSHError(f"{where}: cannot connect: {exc.strerror or exc}") from None
    try:
        known_hosts.check_not_revoked(conn.client.get_transport().get_remote_server_key(), known, where,
                                      endpoint.known_hosts)
    except SSHError:
        conn.close()
        raise
    return conn


# One connection per chain of jump hosts, opened by the first thread that needs it and shared: paramiko opens
# channels on one transport from many threads, and a jump host sees one login, not one per node. A failure is kept
# for a connect timeout, so the other nodes' threads do not each wait one out behind the lock.
_jump_lock = threading.Lock()
_jump_chains: dict[tuple[Endpoint, ...], list[Connection]] = {}
_jump_failures: dict[tuple[Endpoint, ...], tuple[float, SSHError]] = {}
KEEPALIVE = 10   # seconds between keepalives on a jump connection (ansible.cfg's ServerAliveInterval)


def _gateway(host: HostSpec) -> Connection:
    with _jump_lock:
        chain = _jump_chains.get(host.jumps)
        if chain and all(c.transport is not None and c.transport.is_active() for c in chain):
            return chain[-1]
        failed = _jump_failures.get(host.jumps)
        if failed and time.monotonic() - failed[0] < host.connect_timeout:
            raise SSHError(f"{host.name}: {failed[1]}")
        for conn in reversed(chain or []):
            conn.close()
        opened: list[Connection] = []
        try:
            for hop in host.jumps:
                opened.append(_open("its jump host", hop, host.connect_timeout, opened[-1] if opened else None))
                opened[-1].transport.set_keepalive(KEEPALIVE)
        except SSHError as exc:
            for conn in reversed(opened):
                conn.close()
            _jump_failures[host.jumps] = (time.monotonic(), exc)
            _jump_chains.pop(host.jumps, None)
            raise SSHError(f"{host.name}: {exc}") from None
        _jump_failures.pop(host.jumps, None)
        _jump_chains[host.jumps] = opened
        return opened[-1]


def connect(host: HostSpec) -> Connection:
    """An opened Connection whose host key, and each jump host's on the way, has been checked against
    known_hosts."""
    gateway = _gateway(host) if host.jumps else None
    return _open(host.name, host.endpoint, host.connect_timeout, gateway)


def run(conn: Connection, host: HostSpec, command: str, timeout: float) -> CommandResult:
    started = time.monotonic()
    try:
        result = conn.run(host.command(command), hide=True, warn=True, timeout=timeout, in_stream=False)
    except CommandTimedOut:
        return CommandResult(host.name, command, None, "", "", time.monotonic() - started, Failure.TIMED_OUT,
                             f"timed out after {timeout:.0f} s")
    except (paramiko.SSHException, OSError, EOFError) as exc:
        return CommandResult(host.name, command, None, "", "", time.monotonic() - started, Failure.CONNECTION_LOST,
                             f"connection lost: {exc}")
    stderr = result.stderr
    if host.become_user is not None and result.exited == 1 and SUDO_NEEDS_PASSWORD in stderr:
        stderr = (f"sudo on {host.name} asks {host.user} for a password: dapo-ops runs node commands with `sudo -n` "
                  f"(ansible_become), which needs sudo without a password for {host.user}")
    return CommandResult(host.name, command, result.exited, result.stdout, stderr, time.monotonic() - started)


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


def parsed_on_each(hosts: list[HostSpec], command: str, parse: Callable[[str], T],
                   timeout: float = QUICK) -> tuple[dict[str, T], dict[str, str]]:
    """`command` on every host at once and its output through `parse`: (host -> what parse gave, host -> why there is
    nothing: unreachable, a non-zero exit with its stderr's end, or parse's ParseError)."""
    from dapo_ops.errors import ParseError

    results = fan_out(hosts, lambda host: run_on(host, command, timeout=timeout)).results
    values, problems = {}, {}
    for host in hosts:
        result = results.get(host.name)
        if result is None or result.failure is not None:
            problems[host.name] = result.error if result is not None else "no answer"
        elif result.exit_code != 0:
            problems[host.name] = result.stderr.strip()[-200:] or f"exit {result.exit_code}"
        else:
            try:
                values[host.name] = parse(result.stdout)
            except ParseError as exc:
                problems[host.name] = str(exc)
    return values, problems
