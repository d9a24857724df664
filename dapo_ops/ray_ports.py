"""Ray's ports, every one pinned (pure): the inventory's `RAY_PORTS` over the defaults below.

Unpinned, Ray 2.46 lets the kernel or a random draw up to 65535 pick the node manager, object manager and agent
ports (ray/_private/node.py `_get_unused_port`), so no firewall could name them. Pinned, `ray start` gets one flag
per port (templates/ray-*.sh.j2), the run's nftables table (templates/ray-firewall.nft.j2) lets the run's nodes
reach the `PEER` ports and drops every other source, and the `LOCAL` ones answer on the node itself only. The
flags are `ray start`'s (ray 2.46 ray/scripts/scripts.py); Ray's port list: docs.ray.io ray-core/configure.html
"Ports configurations". The job spec's cluster.ray_port / cluster.dashboard_port, when set, override gcs and
dashboard for that job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from dapo_ops.errors import InventoryError
from dapo_ops.firewall.ports import parse_port_spec
from dapo_ops.model.variables import RAY_PORTS

INVENTORY_VAR = RAY_PORTS.name
DEFAULT_RAY_PORTS: dict[str, int | str] = {
    "gcs": 6379,                    # --port (head): every raylet, worker and driver connects
    "node_manager": 6380,           # --node-manager-port: raylets, the GCS and remote workers connect
    "object_manager": 6381,         # --object-manager-port: remote raylets push and pull objects
    "dashboard_agent_grpc": 6382,   # --dashboard-agent-grpc-port: the head's dashboard reads other nodes' logs
    "workers": "10002-19999",       # --min/--max-worker-port: remote workers and the GCS call actors
    "dashboard": 8265,              # --dashboard-port (head), bound to 127.0.0.1: the job API, over SSH only
    "client": 10001,                # --ray-client-server-port (head): Ray Client, unused by dapo-ops
    "dashboard_agent": 52365,       # --dashboard-agent-listen-port: the head's dashboard to its own agent
    "runtime_env_agent": 6383,      # --runtime-env-agent-port: the node's own raylet
    "metrics_export": 6384,         # --metrics-export-port: a Prometheus scraper on the node
    "dashboard_metrics": 44227,     # DASHBOARD_METRIC_PORT (head): a Prometheus scraper on the node
    "autoscaler_metrics": 44217,    # AUTOSCALER_METRIC_PORT (head; ray/autoscaler/_private/constants.py): the same
}
# Reached from the run's other nodes; the rest only from the node itself.
PEER = ("gcs", "node_manager", "object_manager", "dashboard_agent_grpc", "workers")
LOCAL = tuple(name for name in DEFAULT_RAY_PORTS if name not in PEER)


@dataclass(frozen=True)
class RayPorts:
    ranges: tuple[tuple[str, int, int], ...]    # (name, first, last) in DEFAULT_RAY_PORTS order

    def __getitem__(self, name: str) -> int:
        """A single port's number (the first of its range)."""
        return next(first for key, first, _ in self.ranges if key == name)

    def span(self, name: str) -> tuple[int, int]:
        return next((first, last) for key, first, last in self.ranges if key == name)

    def nft_set(self, names: tuple[str, ...]) -> str:
        """'6379, 6380, 10002-19999' for an nftables set of the named ports."""
        return ", ".join(f"{a}" if a == b else f"{a}-{b}" for key, a, b in self.ranges if key in names)

    def as_map(self) -> dict[str, str]:
        return {key: f"{a}" if a == b else f"{a}-{b}" for key, a, b in self.ranges}


def with_defaults(ports: object, what: str = INVENTORY_VAR) -> dict[str, int | str]:
    """The inventory's map over the defaults; InventoryError naming the key for anything else than a known name."""
    if ports is None:
        ports = {}
    if not isinstance(ports, Mapping):
        raise InventoryError(f"{what} must be a mapping of name -> port or FIRST-LAST, got {ports!r}")
    unknown = sorted(str(k) for k in ports if k not in DEFAULT_RAY_PORTS)
    if unknown:
        raise InventoryError(f"{what}.{unknown[0]}: not one of Ray's ports ({', '.join(DEFAULT_RAY_PORTS)})")
    return {**DEFAULT_RAY_PORTS, **{str(k): v for k, v in ports.items()}}


def ray_ports(ports: object, what: str = INVENTORY_VAR, gcs: int | None = None,
              dashboard: int | None = None) -> RayPorts:
    """Parse and check a port map (the inventory's, defaults filled; gcs/dashboard from the job spec win): every
    entry a port or range, single ports where Ray takes one, no two overlapping."""
    merged = with_defaults(ports, what)
    labels = {name: f"{what}.{name}" for name in merged}
    for name, value, label in (("gcs", gcs, "cluster.ray_port"), ("dashboard", dashboard, "cluster.dashboard_port")):
        if value is not None:
            merged[name], labels[name] = value, label
    spans = [(name, *parse_port_spec(merged[name], labels[name])) for name in DEFAULT_RAY_PORTS]
    for name, first, last in spans:
        if name != "workers" and first != last:
            raise InventoryError(f"{labels[name]}: {merged[name]!r} must be one port, not a range")
    first_w, last_w = next((a, b) for name, a, b in spans if name == "workers")
    if last_w - first_w < 15:
        raise InventoryError(f"{labels['workers']}: {first_w}-{last_w} leaves fewer than 16 ports; every Ray worker "
                             "process and driver on a node takes one")
    ordered = sorted(spans, key=lambda s: s[1])
    for (name_a, _, last_a), (name_b, first_b, _) in zip(ordered, ordered[1:]):
        if first_b <= last_a:
            given = {str(k) for k in (ports or {})} | {n for n in merged if labels[n] != f"{what}.{n}"}
            if name_a in given and name_b not in given:  # name the port that was set, not the default it hit
                name_a, name_b = name_b, name_a
            raise InventoryError(f"{labels[name_b]}: {merged[name_b]} is also {labels[name_a]} ({merged[name_a]})")
    return RayPorts(tuple(spans))
