"""The simulated fleet's networks: two bridges, a network namespace and two veth pairs per node, and their removal.

The management bridge carries SSH and the artifact mirror; the training bridge stands for the separate NIC that
HCCL uses on real Atlas servers, and has no address on the controller's side.
"""

from __future__ import annotations

import os
import shutil
import signal
from typing import TYPE_CHECKING

from dapo_ops.sim.proc import run, wait_gone

if TYPE_CHECKING:  # only for annotations: state imports BRIDGE from here
    from dapo_ops.sim.state import NodeState

NETNS_PREFIX = "dapo-"
BRIDGE = "dapobr0"
SUBNET = "10.77.0"          # a private /24 that exists only on the bridge and inside the node namespaces
BRIDGE_IP = f"{SUBNET}.1"
DATA_BRIDGE = "dapobr1"
DATA_SUBNET = "10.78.0"
DATA_NIC = "data0"


def node_ip(index: int) -> str:
    return f"{SUBNET}.{10 + index}"


def node_data_ip(index: int) -> str:
    return f"{DATA_SUBNET}.{10 + index}"


def make_bridges() -> None:
    run(["ip", "link", "add", BRIDGE, "type", "bridge"], "create the bridge")
    run(["ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE], "address the bridge")
    run(["ip", "link", "set", BRIDGE, "up"], "bring the bridge up")
    run(["ip", "link", "add", DATA_BRIDGE, "type", "bridge"], "create the training-network bridge")
    run(["ip", "link", "set", DATA_BRIDGE, "up"], "bring the training-network bridge up")


def add_node(node: NodeState) -> None:
    """Create the node's namespace and wire it to both bridges (node.ip on its veth, node.data_ip on DATA_NIC)."""
    run(["ip", "netns", "add", node.netns], f"create {node.netns}")
    run(["ip", "link", "add", node.veth_host, "type", "veth", "peer", "name", node.veth_node],
        f"create {node.name}'s veth")
    run(["ip", "link", "set", node.veth_host, "master", BRIDGE, "up"], f"attach {node.name} to the bridge")
    run(["ip", "link", "set", node.veth_node, "netns", node.netns], f"move {node.name}'s veth")
    for args in (["link", "set", "lo", "up"], ["addr", "add", f"{node.ip}/24", "dev", node.veth_node],
                 ["link", "set", node.veth_node, "up"]):
        run(["ip", "-n", node.netns, *args], f"configure {node.name}'s network")
    data_peer = f"dapo{node.index}e"
    run(["ip", "link", "add", node.veth_data_host, "type", "veth", "peer", "name", data_peer],
        f"create {node.name}'s training-network veth")
    run(["ip", "link", "set", node.veth_data_host, "master", DATA_BRIDGE, "up"],
        f"attach {node.name} to the training network")
    run(["ip", "link", "set", data_peer, "netns", node.netns], f"move {node.name}'s training-network veth")
    for args in (["link", "set", data_peer, "name", DATA_NIC], ["addr", "add", f"{node.data_ip}/24", "dev", DATA_NIC],
                 ["link", "set", DATA_NIC, "up"]):
        run(["ip", "-n", node.netns, *args], f"configure {node.name}'s training network")


def netns_list() -> list[str]:
    result = run(["ip", "netns", "list"], "list network namespaces", check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def fleet_netns() -> list[str]:
    return [ns for ns in netns_list() if ns.startswith(NETNS_PREFIX)]


def link_exists(name: str) -> bool:
    return run(["ip", "link", "show", name], "inspect link", check=False).returncode == 0


def leftovers() -> dict[str, list[str]]:
    """The fleet's namespaces and bridges still on the machine, by kind (kinds with none are left out)."""
    found = {"netns": fleet_netns(), "links": [b for b in (BRIDGE, DATA_BRIDGE) if link_exists(b)]}
    return {k: v for k, v in found.items() if v}


def remove_namespaces(removed: dict[str, list[str]]) -> None:
    """Kill every process left in the fleet's namespaces, then delete them; record both in `removed`."""
    for ns in fleet_netns():
        pids = run(["ip", "netns", "pids", ns], "list namespace processes", check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
                removed["processes"].append(f"{ns}:{pid}")
            except (ProcessLookupError, ValueError):
                pass
        wait_gone([int(p) for p in pids if p.isdigit()])
        run(["ip", "netns", "del", ns], f"delete {ns}", check=False)
        removed["netns"].append(ns)
        shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)


def stray_links() -> list[str]:
    """The bridges and any dapo<N>{h,n,d,e} veth end still in the root namespace."""
    out = run(["ip", "-o", "link", "show"], "list links", check=False).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    return [n for n in names if n in (BRIDGE, DATA_BRIDGE) or
            (n.startswith("dapo") and n[4:-1].isdigit() and n[-1] in "hnde")]


def remove_links(removed: dict[str, list[str]]) -> None:
    for link in stray_links():
        run(["ip", "link", "del", link], f"delete {link}", check=False)
        removed["links"].append(link)
