"""`sim up` is idempotent; `sim down` leaves nothing behind, also after a crashed bring-up."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dapo_sim.errors import SimError
from dapo_sim import node
from dapo_sim.fleet import BRIDGE, NETNS_PREFIX, FleetSpec, SimFleet
from dapo_sim.netns import DATA_BRIDGE


def netns():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(NETNS_PREFIX)]


def netns_pids(name):
    return subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()


def wait_for(condition, timeout=5):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def links():
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]
    return [n for n in names if n in (BRIDGE, DATA_BRIDGE) or
            (n.startswith("dapo") and n[-1] in "hnde" and n[4:-1].isdigit())]


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
        if stat != "Z" and ("dapo_sshd_config" in cmd or str(state_dir) in cmd or "dapo_sim.mirror" in cmd):
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
    # another checkout's `sim up` on the same fleet restarts nothing and still gets its own inventory (scripts/demo.sh
    # from a fresh clone found an empty inventory/sim and failed site.yml's first check)
    other = SimFleet(state_dir=sim.state_dir, inventory_dir=sim.state_dir / "other-checkout")
    third = other.up(FleetSpec(nodes=2))
    assert [n.pid1 for n in third.nodes] == [n.pid1 for n in first.nodes]
    assert (other.inventory_dir / "hosts.yml").read_text() == (sim.inventory_dir / "hosts.yml").read_text()
    shutil.rmtree(other.inventory_dir)
    # a process started inside a node, detached, is gone after down too
    subprocess.run(["nsenter", "-t", str(first.nodes[0].pid1), "-m", "-u", "-p", "-n", "--", "sh", "-c",
                    "setsid sleep 600 >/dev/null 2>&1 < /dev/null &"], check=True, timeout=10)
    sim.down()
    assert_clean(sim)
    sim.down()  # idempotent too
    assert_clean(sim)


def test_down_after_a_crashed_up(sim, monkeypatch):
    sim.down()
    real_start = node.start

    def start(n, *args, **kwargs):
        real_start(n, *args, **kwargs)
        if n.index == 2:
            raise RuntimeError("the bring-up died here")

    # a bring-up killed half-way, after node2's namespace, veths and processes were made: no teardown ran
    monkeypatch.setattr(node, "start", start)
    monkeypatch.setattr(SimFleet, "down", lambda self: {})
    with pytest.raises(RuntimeError, match="died here"):
        sim.up(FleetSpec(nodes=2))
    monkeypatch.undo()
    assert sorted(netns()) == [f"{NETNS_PREFIX}node1", f"{NETNS_PREFIX}node2"]
    assert len(our_processes(sim.state_dir)) >= 5  # two unshares, two PID 1s, the mirror
    sim.down()  # from the state file alone
    assert_clean(sim)


def test_foreign_resources_named_like_ours_survive_up_and_down(sim):
    """A namespace, a process in it, its /etc/netns dir and a veth that the simulator did not make are not its own,
    whatever their names: `sim up` and `sim down` leave them alone."""
    sim.down()
    victim, etc = f"{NETNS_PREFIX}victim", Path(f"/etc/netns/{NETNS_PREFIX}victim")
    sleeper = None
    try:
        subprocess.run(["ip", "netns", "add", victim], check=True)
        shutil.rmtree(etc, ignore_errors=True)   # a run of this test killed before its cleanup left it
        etc.mkdir(parents=True)
        (etc / "resolv.conf").write_text("options timeout:1\n")
        subprocess.run(["ip", "link", "add", "dapo9h", "type", "veth", "peer", "name", "dapo9n"], check=True)
        sleeper = subprocess.Popen(["ip", "netns", "exec", victim, "sleep", "600"])
        wait_for(lambda: str(sleeper.pid) in netns_pids(victim))
        assert victim in sim.status()["leftovers"]["netns"]
        cli = subprocess.run([sys.executable, "-m", "dapo_sim", "status"], capture_output=True, text=True)
        assert cli.returncode == 1 and "leftovers" in cli.stderr

        sim.up(FleetSpec(nodes=1))
        assert sorted(netns()) == [f"{NETNS_PREFIX}node1", victim]
        sim.down()
        assert netns() == [victim]
        assert sleeper.poll() is None and str(sleeper.pid) in netns_pids(victim)
        assert (etc / "resolv.conf").exists()
        assert sorted(links()) == ["dapo9h", "dapo9n"]
    finally:
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait(timeout=5)
        subprocess.run(["ip", "link", "del", "dapo9h"], capture_output=True)
        subprocess.run(["ip", "netns", "del", victim], capture_output=True)
        shutil.rmtree(etc, ignore_errors=True)
    assert_clean(sim)


def test_a_name_of_ours_taken_by_someone_else_fails_the_up_and_is_left_alone(sim):
    sim.down()
    taken = f"{NETNS_PREFIX}node2"
    try:
        subprocess.run(["ip", "netns", "add", taken], check=True)
        with pytest.raises(SimError, match=f"create {taken}: .*not recorded by this simulator"):
            sim.up(FleetSpec(nodes=2))
        assert netns() == [taken]  # node1's namespace was ours and is gone, the taken one is still there
        assert links() == []
    finally:
        subprocess.run(["ip", "netns", "del", taken], capture_output=True)
    assert_clean(sim)


def test_status_and_down_through_the_cli(sim):
    sim.up(FleetSpec(nodes=2))
    status = subprocess.run([sys.executable, "-m", "dapo_sim", "status", "--json"], capture_output=True,
                            text=True, timeout=60)
    assert status.returncode == 0
    assert '"up": true' in status.stdout
    down = subprocess.run([sys.executable, "-m", "dapo_sim", "down"], capture_output=True, text=True,
                          timeout=60)
    assert down.returncode == 0
    assert_clean(sim)
