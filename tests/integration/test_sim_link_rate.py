"""`dapo-sim up --link-mbit 100`: the controller's uplink and each node's management link carry about 100 Mbit/s
(TCP measured over them, controller to node and node to node), the training network is not limited, and a later
`up` without the rate is a new, unlimited fleet."""

import subprocess
import sys
import threading

import pytest

from dapo_sim.fleet import BRIDGE, FleetSpec
from dapo_sim.netns import DATA_BRIDGE, DATA_NIC

MBIT = 100
SIZE = 25_000_000   # bytes: 2 s at 100 Mbit/s
PORT = 9631

# Inside the receiving node: accept one connection, read to its end, print the bytes and the seconds from the first
RECEIVE = """
import socket, sys, time
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(sys.argv[1])))
server.listen(1)
server.settimeout(30)
conn, _ = server.accept()
conn.settimeout(30)
size, first = 0, None
while chunk := conn.recv(1 << 20):
    first = first or time.monotonic()
    size += len(chunk)
print(size, time.monotonic() - first)
"""
# Send argv[3] bytes to argv[1]:argv[2], connecting until the receiver listens
SEND = """
import socket, sys, time
deadline = time.monotonic() + 20
while True:
    try:
        conn = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
conn.settimeout(60)
block, left = bytes(1 << 20), int(sys.argv[3])
while left > 0:
    conn.sendall(block[:left])
    left -= min(left, len(block))
conn.close()
"""


def mbit_per_s(sim, receiver, send) -> float:
    """Receive SIZE bytes in `receiver` while `send(address, port, size)` sends them; the receiver's Mbit/s."""
    received = {}
    thread = threading.Thread(target=lambda: received.update(
        result=sim.exec_in_node(receiver, ["python3", "-c", RECEIVE, str(PORT)], timeout=60)))
    thread.start()
    try:
        sent = send(receiver.ip, str(PORT), str(SIZE))
    finally:
        thread.join(70)
    assert sent.returncode == 0, sent.stderr
    result = received["result"]
    assert result.returncode == 0, result.stderr
    size, seconds = result.stdout.split()
    assert int(size) == SIZE
    return SIZE * 8 / float(seconds) / 1e6


def from_controller(address, port, size):
    return subprocess.run([sys.executable, "-c", SEND, address, port, size], capture_output=True, text=True,
                          timeout=60)


def qdisc(dev, namespace=None):
    where = ["-n", namespace] if namespace else []
    return subprocess.run(["tc", *where, "qdisc", "show", "dev", dev], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture(scope="module")
def limited(sim):
    return sim.up(FleetSpec(nodes=2, link_mbit=MBIT))


def test_the_management_links_are_limited_and_the_training_network_is_not(sim, limited):
    assert sim.status()["spec"]["link_mbit"] == MBIT
    node1 = limited.nodes[0]
    for dev, namespace in ((BRIDGE, None), (node1.veth_host, None), (node1.veth_node, node1.netns)):
        assert "qdisc tbf" in qdisc(dev, namespace) and f"rate {MBIT}Mbit" in qdisc(dev, namespace), (dev, namespace)
    for dev, namespace in ((DATA_BRIDGE, None), (node1.veth_data_host, None), (DATA_NIC, node1.netns)):
        assert "tbf" not in qdisc(dev, namespace), (dev, namespace)


def test_controller_to_node_and_node_to_node_run_at_the_rate(sim, limited):
    node1, node2 = limited.nodes
    to_node = mbit_per_s(sim, node1, from_controller)
    between = mbit_per_s(sim, node2, lambda *args: sim.exec_in_node(node1, ["python3", "-c", SEND, *args],
                                                                    timeout=60))
    print(f"controller -> node1 {to_node:.1f} Mbit/s, node1 -> node2 {between:.1f} Mbit/s (limit {MBIT})")
    assert 0.6 * MBIT <= to_node <= 1.1 * MBIT
    assert 0.6 * MBIT <= between <= 1.1 * MBIT


def test_up_without_the_rate_is_a_new_unlimited_fleet(sim, limited):
    unlimited = sim.up(FleetSpec(nodes=2))
    assert [n.pid1 for n in unlimited.nodes] != [n.pid1 for n in limited.nodes]   # a spec change: brought up anew
    assert sim.status()["spec"]["link_mbit"] is None
    assert "tbf" not in qdisc(BRIDGE) and "tbf" not in qdisc(unlimited.nodes[0].veth_node, unlimited.nodes[0].netns)
    assert mbit_per_s(sim, unlimited.nodes[0], from_controller) > 2 * MBIT
