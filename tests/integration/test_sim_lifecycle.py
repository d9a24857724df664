"""`sim up` is idempotent; `sim down` leaves nothing behind, also after a crashed bring-up."""

import os
import subprocess
import sys
import time
from pathlib import Path

from dapo_ops.sim.fleet import BRIDGE, NETNS_PREFIX, FleetSpec


def netns():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(NETNS_PREFIX)]


def links():
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]
    return [n for n in names if n == BRIDGE or (n.startswith("dapo") and n[-1] in "hn" and n[4:-1].isdigit())]


def our_processes(state_dir: Path):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if stat != "Z" and ("dapo_sshd_config" in cmd or str(state_dir) in cmd or "dapo_ops.sim.mirror" in cmd):
            found.append(cmd)
    return found


def mounts(state_dir: Path):
    text = Path("/proc/mounts").read_text()
    return [line for line in text.splitlines() if str(state_dir) in line or f"/run/netns/{NETNS_PREFIX}" in line]


def assert_clean(sim):
    assert netns() == []
    assert links() == []
    assert our_processes(sim.state_dir) == []
    assert mounts(sim.state_dir) == []
    assert not (sim.state_dir / "nodes").exists()
    assert not (sim.inventory_dir / "hosts.yml").exists()


def test_up_is_idempotent_and_down_is_clean(sim):
    sim.down()
    first = sim.up(FleetSpec(nodes=2))
    second = sim.up(FleetSpec(nodes=2))
    assert [n.pid1 for n in first.nodes] == [n.pid1 for n in second.nodes]  # nothing restarted
    # a process started inside a node, detached, is gone after down too
    subprocess.run(["nsenter", "-t", str(first.nodes[0].pid1), "-m", "-u", "-p", "-n", "--", "sh", "-c",
                    "setsid sleep 600 >/dev/null 2>&1 < /dev/null &"], check=True, timeout=10)
    sim.down()
    assert_clean(sim)
    sim.down()  # idempotent too
    assert_clean(sim)


def test_down_after_a_crashed_up(sim):
    sim.down()
    # what a bring-up killed half-way leaves behind: a bridge, a namespace with a process in it, no state file
    subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
    subprocess.run(["ip", "netns", "add", f"{NETNS_PREFIX}node1"], check=True)
    subprocess.run(["ip", "link", "add", "dapo1h", "type", "veth", "peer", "name", "dapo1n"], check=True)
    sleeper = subprocess.Popen(["ip", "netns", "exec", f"{NETNS_PREFIX}node1", "sleep", "600"])
    time.sleep(0.2)
    assert sim.status()["leftovers"]
    cli = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "sim", "status"], capture_output=True, text=True)
    assert cli.returncode == 1 and "leftovers" in cli.stderr
    sim.down()
    sleeper.wait(timeout=5)
    assert_clean(sim)


def test_status_and_down_through_the_cli(sim):
    sim.up(FleetSpec(nodes=2))
    status = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "sim", "status", "--json"], capture_output=True,
                            text=True, timeout=60)
    assert status.returncode == 0
    assert '"up": true' in status.stdout
    down = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "sim", "down"], capture_output=True, text=True,
                          timeout=60)
    assert down.returncode == 0
    assert_clean(sim)
