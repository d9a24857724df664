"""Who listens on Ray's pinned ports (pure parsing, plus the shell guard the head runs before sending the token).

A local user who binds a Ray port before `ray start` gets what Ray's clients send there: on the dashboard port,
`Authorization: Bearer <the run's token>` from every `ray job` call, and with it the job API, which runs commands
as root. So:
- the launch, once the leftovers are stopped, reads `ss -Htlnpe` on every node and refuses a node where anything
  holds one of the ports its Ray will bind, naming the port and the owner (the preflight reads the same table and
  refuses a non-root owner);
- the head is started with `--include-dashboard=true` (templates/ray-head.sh.j2): Ray 2.54 otherwise logs a taken
  dashboard port and starts without it (ray/_private/node.py `start_head_processes`, raise_on_api_server_failure);
- every command that sends the token to the dashboard first runs DASHBOARD_GUARD on the head, which refuses unless
  every process holding the port is root's and runs Ray's dashboard (ray/dashboard/dashboard.py).

`ss -e` prints `uid:N` only for a socket whose owner is not root (iproute2 misc/ss.c, sock_details_print); its
`users:((...))` lists the processes holding the socket.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dapo_ops.ray_ports import RayPorts

LISTENERS_COMMAND = "ss -Htlnpe"
# ports only the head binds (templates/ray-head.sh.j2); the rest every node's Ray binds
HEAD_ONLY = ("gcs", "dashboard", "client", "dashboard_metrics", "autoscaler_metrics")
GUARD_EXIT = 97     # DASHBOARD_GUARD's exit code: the caller names the holder and sends nothing
DASHBOARD_SCRIPT = "/ray/dashboard/dashboard.py"

_LINE = re.compile(r"^LISTEN\s+\d+\s+\d+\s+(?P<local>\S+)\s+\S+(?P<rest>.*)$")
_USER = re.compile(r'\("(?P<comm>(?:[^"\\]|\\.)*)",pid=(?P<pid>\d+),fd=\d+\)')
_UID = re.compile(r"\buid:(\d+)\b")


@dataclass(frozen=True)
class Listener:
    address: str
    port: int
    uid: int
    processes: tuple[tuple[int, str], ...]   # (pid, comm)

    def owner(self) -> str:
        procs = ", ".join(f"pid {pid} {comm}" for pid, comm in self.processes) or "no process visible"
        return f"{procs}, uid {self.uid}"


def parse_listeners(text: str) -> list[Listener]:
    """`ss -Htlnpe` output -> its listening sockets. A line in another shape is skipped (ss adds fields over
    time); an address is `ADDR:PORT`, `[V6]:PORT` or `ADDR%IFACE:PORT`."""
    found = []
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        address, sep, port = m.group("local").rpartition(":")
        if not sep or not port.isdigit():
            continue
        uid = _UID.search(m.group("rest"))
        found.append(Listener(address.strip("[]"), int(port), int(uid.group(1)) if uid else 0,
                              tuple(sorted({(int(u.group("pid")), u.group("comm")) for u in
                                            _USER.finditer(m.group("rest"))}))))
    return found


def node_ports(ports: RayPorts, head: bool) -> list[tuple[str, int, int]]:
    """The (name, first, last) ports this node's Ray binds."""
    return [(name, a, b) for name, a, b in ports.ranges if head or name not in HEAD_ONLY]


def port_conflicts(listeners: list[Listener], wanted: list[tuple[str, int, int]], node: str,
                   allow_root: bool = False) -> list[str]:
    """One line per listener on a wanted port; with allow_root, root's listeners are left out (the preflight:
    a running job's own Ray)."""
    lines = []
    for listener in listeners:
        if allow_root and listener.uid == 0:
            continue
        name = next((n for n, a, b in wanted if a <= listener.port <= b), None)
        if name is not None:
            what = f"Ray's {name} port {listener.port}" if name != "workers" else \
                f"port {listener.port} in Ray's worker range"
            lines.append(f"{node}: {what} is already held ({listener.address}, {listener.owner()})")
    return lines


_GUARD = """\
command -v ss >/dev/null || {
  echo "dapo-ops: ss (iproute2) is not installed on $(hostname): cannot check who holds the dashboard port" >&2
  exit @EXIT@; }
dapo_l=$(ss -Htlnpe "sport = :@PORT@")
if [ -z "$dapo_l" ]; then
  echo "dapo-ops: nothing listens on the dashboard port @PORT@ on $(hostname)" >&2; exit @EXIT@
fi
if printf '%s\\n' "$dapo_l" | grep -q ' uid:'; then
  echo "dapo-ops: the dashboard port @PORT@ on $(hostname) is held by a non-root socket:" \\
    "$(printf '%s' "$dapo_l" | grep -o 'users:.*uid:[0-9]*')" >&2; exit @EXIT@
fi
dapo_p=$(printf '%s\\n' "$dapo_l" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u) || true
if [ -z "$dapo_p" ]; then
  echo "dapo-ops: the dashboard port @PORT@ on $(hostname) is held by no visible process" >&2; exit @EXIT@
fi
for dapo_x in $dapo_p; do
  dapo_u=$(stat -c %u "/proc/$dapo_x" 2>/dev/null) || true
  dapo_c=$(tr '\\0' ' ' <"/proc/$dapo_x/cmdline" 2>/dev/null | cut -c1-200) || true
  case "$dapo_u:$dapo_c" in
    "0:"*@SCRIPT@*) ;;
    *) echo "dapo-ops: the dashboard port @PORT@ on $(hostname) is held by pid $dapo_x (uid $dapo_u: $dapo_c)," \\
         "not root's Ray dashboard: the run's token was not sent" >&2; exit @EXIT@;;
  esac
done"""


def dashboard_guard(port: int) -> str:
    """Shell lines that exit GUARD_EXIT, naming the holder on stderr, unless something listens on `port` and every
    process holding it is root's and runs Ray's dashboard. Run before every command that sends the token."""
    return (_GUARD.replace("@PORT@", str(int(port))).replace("@EXIT@", str(GUARD_EXIT))
            .replace("@SCRIPT@", DASHBOARD_SCRIPT))
