"""The node-to-node SSH of one `dapo-ops stage` run (pure but for key generation): a fresh Ed25519 key that only
this run knows, its private half in the run's private directory on each node that passes files on, its public half
in the next node's authorized_keys for as long as the run lasts, restricted (sshd(8) AUTHORIZED_KEYS FILE FORMAT:
`restrict`, a forced `command`) to the run's relay, and the next node's host key from the controller's own
known_hosts: the nodes check each other as strictly as the controller checks them."""

from __future__ import annotations

import ipaddress
import shlex
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

COMMENT_PREFIX = "dapo-ops-stage-"
RELAY_COMMAND = "dapo-ops-stage-relay"


@dataclass(frozen=True)
class RunKey:
    private_openssh: bytes
    public: str          # "ssh-ed25519 AAAA..."
    token: str           # the run's mark on its authorized_keys lines

    @property
    def comment(self) -> str:
        return COMMENT_PREFIX + self.token


def new_key(token: str) -> RunKey:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return RunKey(private, public.decode(), token)


def authorized_line(key: RunKey, forced_command: str, source: str = "") -> str:
    """The authorized_keys line: the key may run the forced command only (no pty, no forwarding of any kind), and,
    when the previous node's address is an IP address, only from there (sshd matches from= against names only
    with UseDNS)."""
    quoted = forced_command.replace('"', '\\"')   # sshd undoes \" only (OpenSSH misc.c opt_dequote)
    try:
        origin = f'from="{ipaddress.ip_address(source)}",'
    except ValueError:
        origin = ""
    return f'restrict,{origin}command="{quoted}" {key.public} {key.comment}'


AK = "~/.ssh/authorized_keys"
# authorized_keys is changed under an exclusive flock(1) on it (when flock is there): two runs ending at once on one
# node never rewrite it from each other's half-written copies
LOCK = f"exec 9>>{AK} && {{ ! command -v flock >/dev/null || flock -x -w 60 9; }}"


def authorize_command(line: str) -> str:
    """Append the line to the login user's authorized_keys (made 0600 in a 0700 ~/.ssh when missing), on a line of
    its own: a file whose last key has no final newline gets one first, so the removal never takes that key too. A
    file (and ~/.ssh) this makes is marked, for the removal to take it away again."""
    made = made_marker(line.rsplit(" ", 1)[-1])
    return (f"umask 077 && {{ [ -d ~/.ssh ] && d= || d=dir; }} && mkdir -p ~/.ssh && "
            f"{{ [ -e {AK} ] || echo $d > {made}; }} && {LOCK} && "
            f"{{ [ ! -s {AK} ] || [ -z \"$(tail -c 1 {AK})\" ] || echo >&9; }} && "
            f"printf '%s\\n' {shlex.quote(line)} >&9")


def made_marker(comment: str) -> str:
    return f"~/.ssh/.{shlex.quote(comment)}.made"


def unauthorize_command(key: RunKey) -> str:
    """Remove every line of this run (by its comment, which ends the line) from the login user's authorized_keys,
    rewriting the file in place (its inode, mode and any link kept) from a whole copy of its own; a failed read
    changes nothing. A file the run made, empty again, goes (with ~/.ssh, when the run made that too)."""
    pattern = shlex.quote(f" {key.comment}$")
    made = made_marker(key.comment)
    return (f"[ -f {AK} ] || exit 0; umask 077; {LOCK} || exit 1; "
            "keep=$(mktemp ~/.ssh/.authorized_keys.XXXXXXXX) || exit 1; "
            f"grep -v -- {pattern} {AK} > \"$keep\"; rc=$?; "
            f"if [ $rc -le 1 ]; then cat \"$keep\" > {AK}; rc=$?; else rc=1; fi; rm -f \"$keep\"; "
            f"if [ $rc -eq 0 ] && [ -e {made} ]; then [ -s {AK} ] || rm -f {AK}; "
            f"d=$(cat {made}); rm -f {made}; [ \"$d\" != dir ] || rmdir ~/.ssh 2>/dev/null; fi; exit $rc")


def known_hosts_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def hop_argv(run_dir: str, user: str, address: str, port: int) -> list[str]:
    """The ssh command a node runs to reach the next one (no ssh config of the node's applies): this run's key only, the next node's host key from the
    run's known_hosts only, no agent, no prompts, no terminal. The remote command is the forced one whatever is
    asked (RELAY_COMMAND only names it in the node's logs)."""
    return ["ssh", "-F", "/dev/null", "-T", "-i", f"{run_dir}/key", "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none",
            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={run_dir}/known_hosts",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=10",
            "-o", "ForwardAgent=no", "-o", "ClearAllForwardings=yes", "-p", str(port), "-l", user, address, RELAY_COMMAND]
