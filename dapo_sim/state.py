"""What a simulated fleet was asked for (FleetSpec) and what `sim up` started (FleetState, saved as fleet.json),
with the ledger of everything it made (Resource), which is all that `sim down` removes."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from dapo_sim.netns import BRIDGE


@dataclass(frozen=True)
class FleetSpec:
    nodes: int
    npus_per_node: int = 16
    faults: tuple[str, ...] = ()
    provisioned: bool = False
    ssh_user: str = "root"   # the one user the nodes let in (with sudo when not root)
    bastion: bool = False    # the nodes let SSH in only from a jump host
    ssh_key: str = ""        # the controller's key pair the nodes accept (default: the simulator's own)
    link_mbit: int | None = None  # Mbit/s of the controller's uplink and each node's management link (None: unlimited)


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
class Resource:
    """One thing `sim up` made, recorded right after it was made.

    kind: "bridge", "netns", "link" (the host end of a veth pair: deleting it deletes its peer) or "process".
    ident tells it apart from a namesake made after it was gone: a process's start time (proc.start_time), a
    namespace's inode, a link's ifindex. None when unknown (a ledger rebuilt from an older fleet.json), and then a
    process is recognised by `marker` in its command line instead.
    """
    kind: str
    name: str
    pid: int | None = None
    ident: int | None = None
    marker: str = ""


@dataclass
class FleetState:
    spec: dict
    nodes: list[NodeState] = field(default_factory=list)
    bridge: str = BRIDGE
    mirror_pid: int | None = None
    mirror_url: str = ""
    created_at: float = 0.0
    up_seconds: float | None = None
    boot_id: str = ""  # the machine's boot the ledger belongs to: no process, namespace or link outlives a reboot
    # None: a fleet.json written before the ledger (see ledger.resources)
    ledger: list[Resource] | None = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> FleetState:
        data = json.loads(text)
        data["nodes"] = [NodeState(**n) for n in data.get("nodes", [])]
        data["ledger"] = None if data.get("ledger") is None else [Resource(**r) for r in data["ledger"]]
        return cls(**data)
