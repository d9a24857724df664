"""The rehearsal's tcp collective backend: point-to-point messages between ranks over plain sockets, no torch.

Pushed to the head next to rehearsal_driver.py (which imports it from its own directory) and shipped by Ray to the
rank actors with the driver's code; stdlib only, like the driver.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

SIOCGIFADDR = 0x8915
BIND_ATTEMPTS = 64


def bound_socket(address: str, avoid: list) -> socket.socket:
    """A TCP socket bound to a kernel-chosen port of `address` that is in none of `avoid` ([first, last] ranges:
    Ray's pinned ports). The kernel draws from ip_local_port_range, which holds Ray's dashboard and metrics ports
    (44217, 44227, 52365 by default); the run's firewall table drops those from every other node, so a rank that
    drew one could be reached by none of them. A rejected socket stays bound until the end, so the kernel does
    not hand out its port again."""
    rejected = []
    try:
        for _ in range(BIND_ATTEMPTS):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, 0))
            port = sock.getsockname()[1]
            if not any(first <= port <= last for first, last in avoid):
                return sock
            rejected.append(sock)
        raise OSError(f"no free port on {address} outside Ray's ports in {BIND_ATTEMPTS} tries")
    finally:
        for sock in rejected:
            sock.close()


def interface_address(ifname: str) -> str | None:
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", ifname[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


class Mailbox:
    """The tcp backend's receiving end: a listening socket whose messages are kept by (tag, sender)."""

    def __init__(self, address: str, avoid: list):
        self.server = bound_socket(address, avoid)
        self.server.listen(256)
        self.port = self.server.getsockname()[1]
        self.messages: dict[tuple[str, int], bytes] = {}
        self.arrived = threading.Condition()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._receive, args=(conn,), daemon=True).start()

    def _receive(self, conn: socket.socket) -> None:
        chunks = []
        try:
            with conn:
                conn.settimeout(60)
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
            data = b"".join(chunks)
            header_length = struct.unpack("!I", data[:4])[0]
            header = json.loads(data[4:4 + header_length])
        except (OSError, ValueError, struct.error):
            return  # a broken message: its sender shows up as missing in wait_for
        with self.arrived:
            self.messages[(header["tag"], header["sender"])] = data[4 + header_length:]
            self.arrived.notify_all()

    def wait_for(self, tag: str, senders: list[int], deadline: float) -> dict[int, bytes]:
        with self.arrived:
            while True:
                missing = [s for s in senders if (tag, s) not in self.messages]
                if not missing:
                    return {s: self.messages.pop((tag, s)) for s in senders}
                if not self.arrived.wait(timeout=max(0.0, deadline - time.monotonic())) and \
                        time.monotonic() >= deadline:
                    raise TimeoutError(f"{tag}: nothing from rank(s) {missing[:8]}")


def send(address: tuple[str, int], sender: int, tag: str, payload: bytes, timeout: float) -> None:
    header = json.dumps({"tag": tag, "sender": sender}).encode()
    with socket.create_connection(address, timeout=timeout) as conn:
        conn.sendall(struct.pack("!I", len(header)) + header + payload)


def send_all(messages: dict[int, bytes], endpoints: list, sender: int, tag: str, deadline: float) -> None:
    """Send every peer its message at once (one blocked peer must not eat the others' time); raise naming every
    peer that could not be reached."""
    errors: dict[int, str] = {}

    def one(peer: int) -> None:
        try:
            send(tuple(endpoints[peer]), sender, tag, messages[peer],
                 timeout=max(0.5, min(10.0, deadline - time.monotonic())))
        except OSError as exc:
            errors[peer] = f"{exc.strerror or exc}"
    threads = [threading.Thread(target=one, args=(peer,), daemon=True) for peer in messages]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise ConnectionError("; ".join(f"cannot reach rank {peer} at {endpoints[peer][0]}:{endpoints[peer][1]} "
                                        f"({error})" for peer, error in sorted(errors.items())))


def chunk(sender: int, receiver: int, size: int) -> bytes:
    seed = f"{sender}->{receiver};".encode()
    return (seed * (size // len(seed) + 1))[:size]
