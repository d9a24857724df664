"""known_hosts for paramiko, which reads plain entries only: OpenSSH's marker lines are handled here.

`@revoked HOSTS KEYTYPE KEY` (ssh(8) "SSH_KNOWN_HOSTS FILE FORMAT"): that key is refused for any host, even one it
is also listed for. `@cert-authority` lines let OpenSSH accept host certificates signed by a CA; paramiko cannot
check host certificates, so those lines are skipped and a host known only through a CA is refused as unknown,
saying why. Plain lines go to paramiko unchanged (hashed names included).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from dapo_ops.errors import SSHError


@dataclass
class KnownHosts:
    plain: list[str] = field(default_factory=list)     # the lines paramiko reads
    revoked: set[str] = field(default_factory=set)     # base64 key blobs
    cert_authorities: int = 0


def parse_known_hosts(text: str, where: str) -> KnownHosts:
    """Split a known_hosts file (pure); SSHError naming the line for a malformed marker line."""
    known = KnownHosts()
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped.startswith("@"):
            known.plain.append(line)
            continue
        fields = stripped.split()
        if len(fields) < 4:
            raise SSHError(f"{where}:{number}: a {fields[0]} line needs hosts, a key type and a key")
        if fields[0] == "@revoked":
            known.revoked.add(fields[3])
        elif fields[0] == "@cert-authority":
            known.cert_authorities += 1
        else:
            raise SSHError(f"{where}:{number}: unknown marker {fields[0]} (known: @revoked, @cert-authority)")
    return known


def load_into(client: paramiko.SSHClient, path: Path) -> KnownHosts:
    """Give the client the file's plain entries; returns what was parsed (the revoked keys, the CA count)."""
    try:
        known = parse_known_hosts(path.read_text(), str(path))
    except OSError as exc:
        raise SSHError(f"cannot read known_hosts {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise SSHError(f"known_hosts {path} is not text") from None
    handle, plain = tempfile.mkstemp(prefix="dapo-known-hosts-")
    try:
        with os.fdopen(handle, "w") as out:
            out.write("\n".join(known.plain) + "\n")
        client.load_host_keys(plain)
    except paramiko.hostkeys.InvalidHostKey as exc:
        raise SSHError(f"known_hosts {path}: a line paramiko cannot read: {str(exc.args[0])[:80]!r}") from None
    finally:
        os.unlink(plain)
    return known


def check_not_revoked(key: paramiko.PKey, known: KnownHosts, host: str, path: Path) -> None:
    if key.get_base64() in known.revoked:
        raise SSHError(f"{host}: its host key is marked @revoked in {path} — refusing to connect")
