"""Files to and from a node over an SSH exec channel, as the user commands run as there (through sudo with
become): `cat` in either direction, never SFTP, which would write and read as the login user."""

from __future__ import annotations

import shlex

from fabric import Connection

from dapo_ops.errors import SSHError
from dapo_ops.fleet.ssh import HostSpec


def exchange(conn: Connection, host: HostSpec, command: str, stdin: bytes, timeout: float) -> tuple[int, bytes]:
    """Run a command with `stdin` as its input, as the host's user (through sudo with become); (exit code, stdout
    bytes). For files in either direction: no SFTP, which would write and read as the login user."""
    channel = conn.client.get_transport().open_session(timeout=timeout)
    try:
        channel.settimeout(timeout)
        channel.exec_command(host.command(command))
        if stdin:
            channel.sendall(stdin)
        channel.shutdown_write()
        out = channel.makefile("rb").read()
        return channel.recv_exit_status(), out
    finally:
        channel.close()


def write_file(conn: Connection, host: HostSpec, path: str, data: bytes, mode: int, timeout: float) -> None:
    """Write a file whole: a fresh file created 0600 before a byte is written (never one left there, nor a link's
    target), then given its mode and moved to its name, so a reader never sees part of it; on a failure it is
    removed."""
    partial = shlex.quote(f"{path}.partial")
    rc, _ = exchange(conn, host, f"umask 077 && rm -f {partial} && {{ cat > {partial} && chmod {mode:o} {partial} && "
                                 f"mv -f {partial} {shlex.quote(path)}; }} || {{ rm -f {partial}; exit 1; }}", data,
                     timeout)
    if rc != 0:
        raise SSHError(f"writing {path} on {host.name} failed (exit {rc})")


def read_file(conn: Connection, host: HostSpec, path: str, timeout: float) -> bytes:
    rc, data = exchange(conn, host, f"cat {shlex.quote(path)}", b"", timeout)
    if rc != 0:
        raise SSHError(f"reading {path} on {host.name} failed (exit {rc})")
    return data
