"""The simulated fleet's networks: two bridges, a network namespace and two veth pairs per node, and their removal.

The management bridge carries SSH and the artifact mirror; the training bridge stands for the separate NIC that
HCCL uses on real Atlas servers, and has no address on the controller's side. With a link rate (`sim up
--link-mbit N`) a `tbf` qdisc limits the controller's uplink (the management bridge's egress) and each node's
management veth, both ways; the training bridge stays unlimited.

Each bridge, namespace and veth pair is handed to `record` (the fleet's ledger) right after it was made. Nothing
is removed by its name alone: `remove` deletes a recorded one only while it is still the one that was recorded.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

from dapo_ops.errors import UsageError
from dapo_sim.errors import SimError
from dapo_sim.proc import failure, run

if TYPE_CHECKING:  # only for annotations: state imports BRIDGE from here
    from dapo_sim.state import NodeState

Record = Callable[[str, str], None]  # record(kind, name): see state.Resource

NETNS_PREFIX = "dapo-"
NETNS_DIR = "/var/run/netns"  # where `ip netns add` mounts a named namespace
BRIDGE = "dapobr0"
SUBNET = "10.77.0"          # a private /24 that exists only on the bridge and inside the node namespaces
BRIDGE_IP = f"{SUBNET}.1"
DATA_BRIDGE = "dapobr1"
DATA_SUBNET = "10.78.0"
DATA_NIC = "data0"
# `sim up --link-mbit`: tbf's burst holds two of a veth's 64 KiB GSO packets, which tbf then passes whole (with a
# burst of 1600 bytes it cut each into segments in software: 152 Mbit/s of 200, measured); its queue holds 50 ms
# (5 ms dropped packets at 100 Mbit/s, 20 did not). 100 Gbit/s is more than a veth carries here.
MAX_LINK_MBIT = 100_000
LINK_BURST_MIN = 128 * 1024
LINK_LATENCY = "50ms"


def node_ip(index: int) -> str:
    return f"{SUBNET}.{10 + index}"


def node_data_ip(index: int) -> str:
    return f"{DATA_SUBNET}.{10 + index}"


def check_link_mbit(mbit: int | None) -> None:
    if mbit is not None and not 1 <= mbit <= MAX_LINK_MBIT:
        raise UsageError(f"--link-mbit must be between 1 and {MAX_LINK_MBIT} (got {mbit})")


def tbf_command(dev: str, mbit: int, netns: str | None = None) -> list[str]:
    """The `tc` command that limits dev's egress (in namespace netns, if given) to mbit Mbit/s: a root token bucket
    whose burst holds whole GSO packets, or 1 ms at the rate when that is more (above about 1 Gbit/s)."""
    burst = max(LINK_BURST_MIN, mbit * 125)
    where = ["-n", netns] if netns else []
    return ["tc", *where, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit", "burst", str(burst),
            "latency", LINK_LATENCY]


def limit_link(dev: str, mbit: int | None, netns: str | None = None) -> None:
    """Limit dev's egress to mbit Mbit/s; None leaves it unlimited. The qdisc goes with the device."""
    if mbit is not None:
        run(tbf_command(dev, mbit, netns), f"limit {dev} to {mbit} Mbit/s")


def make_bridges(record: Record, link_mbit: int | None = None) -> None:
    """The management bridge (its egress, the controller's uplink to the nodes, limited to link_mbit) and the
    training bridge."""
    create(["ip", "link", "add", BRIDGE, "type", "bridge"], "bridge", BRIDGE, record)
    run(["ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE], "address the bridge")
    run(["ip", "link", "set", BRIDGE, "up"], "bring the bridge up")
    limit_link(BRIDGE, link_mbit)
    create(["ip", "link", "add", DATA_BRIDGE, "type", "bridge"], "bridge", DATA_BRIDGE, record)
    run(["ip", "link", "set", DATA_BRIDGE, "up"], "bring the training-network bridge up")


def add_node(node: NodeState, record: Record, link_mbit: int | None = None) -> None:
    """Create the node's namespace and wire it to both bridges (node.ip on its veth, node.data_ip on DATA_NIC); with
    link_mbit, its management veth carries that many Mbit/s each way (the host end's egress is the node's inbound)."""
    create(["ip", "netns", "add", node.netns], "netns", node.netns, record)
    create(["ip", "link", "add", node.veth_host, "type", "veth", "peer", "name", node.veth_node], "link",
            node.veth_host, record, peer=node.veth_node)
    run(["ip", "link", "set", node.veth_host, "master", BRIDGE, "up"], f"attach {node.name} to the bridge")
    run(["ip", "link", "set", node.veth_node, "netns", node.netns], f"move {node.name}'s veth")
    for args in (["link", "set", "lo", "up"], ["addr", "add", f"{node.ip}/24", "dev", node.veth_node],
                 ["link", "set", node.veth_node, "up"]):
        run(["ip", "-n", node.netns, *args], f"configure {node.name}'s network")
    limit_link(node.veth_host, link_mbit)
    limit_link(node.veth_node, link_mbit, node.netns)
    data_peer = f"dapo{node.index}e"
    create(["ip", "link", "add", node.veth_data_host, "type", "veth", "peer", "name", data_peer], "link",
            node.veth_data_host, record, peer=data_peer)
    run(["ip", "link", "set", node.veth_data_host, "master", DATA_BRIDGE, "up"],
        f"attach {node.name} to the training network")
    run(["ip", "link", "set", data_peer, "netns", node.netns], f"move {node.name}'s training-network veth")
    for args in (["link", "set", data_peer, "name", DATA_NIC], ["addr", "add", f"{node.data_ip}/24", "dev", DATA_NIC],
                 ["link", "set", DATA_NIC, "up"]):
        run(["ip", "-n", node.netns, *args], f"configure {node.name}'s training network")


def create(cmd: list[str], kind: str, name: str, record: Record, peer: str = "") -> None:
    """Make a bridge, namespace or veth pair and record it. A name already taken was not made by this fleet
    (whatever it made is gone before it makes anything): it is named, and left alone."""
    result = run(cmd, f"create {name}", check=False)
    if result.returncode != 0:
        for taken in (name, peer):
            if taken and identity("netns" if kind == "netns" else "link", taken) is not None:
                raise SimError(f"create {taken}: File exists — it is not recorded by this simulator; "
                               "remove it yourself")
        raise failure(f"create {name}", result)
    record(kind, name)


def identity(kind: str, name: str) -> int | None:
    """What tells this namespace (its inode) or link (its ifindex) from a later namesake; None if there is none."""
    if kind == "netns":
        try:
            return os.stat(f"{NETNS_DIR}/{name}").st_ino
        except OSError:
            return None
    out = run(["ip", "-o", "link", "show", "dev", name], "inspect link", check=False).stdout
    index = out.split(":", 1)[0].strip()
    return int(index) if index.isdigit() else None


def remove(kind: str, name: str, recorded: int | None) -> bool:
    """Delete a recorded namespace or link (a veth's peer goes with it) if it is still the one recorded; recorded
    without an identity (an older fleet.json), if one by that name exists."""
    kind = "netns" if kind == "netns" else "link"
    current = identity(kind, name)
    if current is None or (recorded is not None and current != recorded):
        return False
    return run(["ip", kind, "del", name], f"delete {name}", check=False).returncode == 0


def netns_list() -> list[str]:
    result = run(["ip", "netns", "list"], "list network namespaces", check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def fleet_netns() -> list[str]:
    return [ns for ns in netns_list() if ns.startswith(NETNS_PREFIX)]


def named_like_ours() -> list[str]:
    """The bridges and any dapo<N>{h,n,d,e} veth end in the root namespace, whoever made them."""
    out = run(["ip", "-o", "link", "show"], "list links", check=False).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    return [n for n in names if n in (BRIDGE, DATA_BRIDGE) or
            (n.startswith("dapo") and n[4:-1].isdigit() and n[-1] in "hnde")]


def leftovers() -> dict[str, list[str]]:
    """Namespaces and links named like the fleet's (kinds with none are left out): for information only, since
    nothing but the ledger says what is the simulator's."""
    found = {"netns": fleet_netns(), "links": named_like_ours()}
    return {k: v for k, v in found.items() if v}
