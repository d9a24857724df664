"""What a simulated fleet was asked for (FleetSpec) and what `sim up` started (FleetState, saved as fleet.json)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from dapo_ops.sim.netns import BRIDGE


@dataclass(frozen=True)
class FleetSpec:
    nodes: int
    npus_per_node: int = 16
    faults: tuple[str, ...] = ()
    provisioned: bool = False


@dataclass
class NodeState:
    name: str
    index: int
    ip: str
    netns: str
    veth_host: str
    veth_node: str
    dir: str
    unshare_pid: int | None = None
    pid1: int | None = None
    data_ip: str = ""
    veth_data_host: str = ""


@dataclass
class FleetState:
    spec: dict
    nodes: list[NodeState] = field(default_factory=list)
    bridge: str = BRIDGE
    mirror_pid: int | None = None
    mirror_url: str = ""
    created_at: float = 0.0
    up_seconds: float | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> FleetState:
        data = json.loads(text)
        data["nodes"] = [NodeState(**n) for n in data.get("nodes", [])]
        return cls(**data)
