"""The simulator's ledger (issue 15, item 7): `sim up` records what it made as it makes it, `sim down` removes what
is recorded and still the very thing recorded, and a node sees the simulator's state dir empty. No root needed."""

import json
import os
import signal
import subprocess
import time

import pytest

from dapo_sim.errors import SimError
from dapo_sim import ledger, netns, node, proc
from dapo_sim.state import FleetState, NodeState, Resource


def node_state(index, **pids):
    return NodeState(name=f"node{index}", index=index, ip=f"10.77.0.{10 + index}", netns=f"dapo-node{index}",
                     veth_host=f"dapo{index}h", veth_node=f"dapo{index}n", dir=f"/state/nodes/node{index}",
                     data_ip=f"10.78.0.{10 + index}", veth_data_host=f"dapo{index}d", **pids)


def test_the_ledger_goes_to_fleet_json_and_back():
    state = FleetState(spec={"nodes": 1}, nodes=[node_state(1)], boot_id="b1",
                       ledger=[Resource("bridge", "dapobr0", ident=7), Resource("process", "mirror", pid=42, ident=9)])
    again = FleetState.from_json(state.to_json())
    assert again == state and ledger.resources(again) == state.ledger


def test_a_fleet_json_from_before_the_ledger_yields_only_what_it_shows_was_made():
    """node2 had no process yet: its namespace and veths may never have been made, so they are not in the ledger."""
    old = FleetState(spec={"nodes": 2}, nodes=[node_state(1, unshare_pid=100, pid1=101), node_state(2)],
                     mirror_pid=50, created_at=1.0)
    data = json.loads(old.to_json())
    del data["ledger"], data["boot_id"]
    state = FleetState.from_json(json.dumps(data))
    assert state.ledger is None
    made = {(r.kind, r.name, r.pid, r.marker) for r in ledger.resources(state)}
    assert made == {("bridge", "dapobr0", None, ""), ("bridge", "dapobr1", None, ""),
                    ("process", "mirror", 50, "dapo_sim.mirror"), ("netns", "dapo-node1", None, ""),
                    ("link", "dapo1h", None, ""), ("link", "dapo1d", None, ""),
                    ("process", "node1/unshare", 100, "/state/nodes/node1"),
                    ("process", "node1/pid1", 101, "dapo_sshd_config")}
    assert ledger.resources(FleetState(spec={}, nodes=[node_state(1)])) == []  # nothing started: nothing made


def test_each_thing_is_saved_as_soon_as_it_is_recorded(monkeypatch):
    monkeypatch.setattr(netns, "identity", lambda kind, name: {"dapobr0": 3, "dapo-node1": 4}[name])
    saved = []
    state = FleetState(spec={})
    record = ledger.Recorder(state, lambda s: saved.append(s.to_json()))
    record("bridge", "dapobr0")
    record("netns", "dapo-node1")
    record("process", "me", pid=os.getpid())
    assert [len(json.loads(s)["ledger"]) for s in saved] == [1, 2, 3]
    assert [r.ident for r in state.ledger[:2]] == [3, 4]
    assert state.ledger[2].ident == proc.start_time(os.getpid()) is not None


def test_a_process_is_killed_only_while_it_has_the_recorded_start_time():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        start = proc.start_time(sleeper.pid)
        assert start is not None
        assert not proc.kill_if_ours(sleeper.pid, start + 1, signal.SIGKILL)  # a recycled PID: someone else's
        assert not proc.kill_if_ours(sleeper.pid, None, signal.SIGKILL)  # no start time and no marker
        assert not proc.kill_if_ours(sleeper.pid, None, signal.SIGKILL, marker="not-in-its-command-line")
        time.sleep(0.1)
        assert sleeper.poll() is None
        assert proc.kill_if_ours(sleeper.pid, start, signal.SIGKILL)
        assert sleeper.wait(timeout=5) == -signal.SIGKILL
        assert not proc.kill_if_ours(sleeper.pid, start, signal.SIGKILL)  # gone: fine
    finally:
        sleeper.kill()
        sleeper.wait()


def teardown_calls(monkeypatch, state):
    calls, removed = [], {"processes": [], "netns": [], "links": []}
    monkeypatch.setattr(ledger, "kill_if_ours",
                        lambda pid, start, sig, marker="": calls.append(("kill", pid, start, sig)) or True)
    monkeypatch.setattr(ledger, "wait_gone", lambda pids: calls.append(("wait", sorted(pids))))
    monkeypatch.setattr(netns, "remove", lambda kind, name, ident: calls.append((kind, name, ident)) or name != "gone")
    ledger.teardown(state, removed)
    return calls, removed


def test_down_removes_the_recorded_processes_first_then_the_rest_newest_first(monkeypatch):
    monkeypatch.setattr(ledger, "boot_id", lambda: "this-boot")
    state = FleetState(spec={}, boot_id="this-boot", ledger=[
        Resource("bridge", "dapobr0", ident=1), Resource("process", "mirror", pid=10, ident=100),
        Resource("netns", "dapo-node1", ident=2), Resource("link", "dapo1h", ident=3),
        Resource("process", "node1/unshare", pid=11, ident=101), Resource("process", "node1/pid1", pid=12, ident=102),
        Resource("link", "gone", ident=4)])
    calls, removed = teardown_calls(monkeypatch, state)
    assert calls == [("kill", 12, 102, signal.SIGKILL), ("kill", 11, 101, signal.SIGKILL),
                     ("kill", 10, 100, signal.SIGTERM), ("wait", [10, 11, 12]),
                     ("link", "gone", 4), ("link", "dapo1h", 3), ("netns", "dapo-node1", 2), ("bridge", "dapobr0", 1)]
    assert removed == {"processes": ["node1/pid1:12", "node1/unshare:11", "mirror:10"], "netns": ["dapo-node1"],
                       "links": ["dapo1h", "dapobr0"]}


def test_after_a_reboot_nothing_in_the_ledger_is_ours_any_more(monkeypatch):
    monkeypatch.setattr(ledger, "boot_id", lambda: "this-boot")
    monkeypatch.setattr(ledger, "boot_time", lambda: 1000.0)
    made = [Resource("netns", "dapo-node1", ident=2), Resource("process", "node1/pid1", pid=12, ident=102)]
    assert teardown_calls(monkeypatch, FleetState(spec={}, boot_id="earlier-boot", ledger=made))[0] == []
    # a fleet.json from before the ledger: written before this boot
    assert teardown_calls(monkeypatch, FleetState(spec={}, created_at=999.0, ledger=made))[0] == []
    assert teardown_calls(monkeypatch, FleetState(spec={}, created_at=1001.0, ledger=made))[0] != []


def test_a_namesake_made_by_someone_else_is_not_removed(monkeypatch):
    ran = []
    monkeypatch.setattr(netns, "identity", lambda kind, name: {"dapo-node1": 5}.get(name))
    monkeypatch.setattr(netns, "run", lambda cmd, what, check=True: ran.append(cmd) or subprocess.CompletedProcess(
        cmd, 0, "", ""))
    assert not netns.remove("netns", "dapo-node1", 4)  # another namespace by that name now
    assert not netns.remove("link", "dapo1h", 3)  # gone
    assert ran == []
    assert netns.remove("netns", "dapo-node1", 5) and ran == [["ip", "netns", "del", "dapo-node1"]]


def test_a_name_that_is_taken_fails_the_bring_up_naming_it(monkeypatch):
    monkeypatch.setattr(netns, "identity", lambda kind, name: {"dapo1n": 8}.get(name))
    monkeypatch.setattr(netns, "run", lambda cmd, what, check=True: subprocess.CompletedProcess(
        cmd, 2, "", "RTNETLINK answers: File exists"))
    recorded = []
    with pytest.raises(SimError, match="^create dapo1n: File exists — it is not recorded by this simulator; "
                                       "remove it yourself$"):
        netns.create(["ip", "link", "add", "dapo1h"], "link", "dapo1h", lambda *a: recorded.append(a),
                      peer="dapo1n")
    assert recorded == []


def test_a_node_mounts_an_empty_dir_over_the_state_dir_after_its_last_overlay(tmp_path):
    state_dir = tmp_path / "sim state"
    (state_dir / "nodes").mkdir(parents=True)
    (tmp_path / "link").symlink_to(state_dir)
    script = node.init_script(node_state(1), [0, 1], state_dir / "fabric", tmp_path / "link", 1536)
    hide = f"mount -t tmpfs -o mode=0700,size=4k,nosuid,nodev,noexec dapo-hidden '{state_dir.resolve()}'"
    lines = script.splitlines()
    assert hide in lines
    assert lines.index(hide) > max(i for i, line in enumerate(lines) if "-t overlay" in line)
    assert lines[-1].startswith("exec ")


def test_every_bind_from_the_state_dir_comes_before_the_var_lib_overlay(tmp_path):
    """The /var/lib overlay shows the state dir's path as it is on disk: a bind mount over that path (CI's integration
    groups give each group its own state dir so) is not seen through it, so every bind from the state dir is made
    before it."""
    state_dir = tmp_path / "sim"
    (state_dir / "nodes").mkdir(parents=True)
    lines = node.init_script(node_state(1), [0, 1], state_dir / "fabric", state_dir, 1536).splitlines()
    var_lib = next(i for i, line in enumerate(lines) if "-t overlay" in line and line.endswith(" /var/lib"))
    sources = (str(state_dir), node_state(1).dir)   # the fabric table; the node's disk, hardware model and meminfo
    binds = [i for i, line in enumerate(lines) if line.startswith("mount --bind ") and any(s in line for s in sources)]
    assert binds and max(binds) < var_lib, lines


@pytest.mark.parametrize("state_dir, message", [("/", "at least two levels below /"),
                                                ("/var", "at least two levels below /"),
                                                ("/var/../srv", "at least two levels below /"),
                                                ("/tmp/sim", "must not be under /tmp")])
def test_up_and_down_refuse_a_state_dir_they_could_wreck(monkeypatch, state_dir, message):
    """Issue 26 (low): `down` deletes fixed subdirectories of the state dir, `up` writes into it: neither accepts /,
    a top-level directory, or a place the nodes overlay."""
    from dapo_ops.errors import UsageError
    from dapo_sim.fleet import SimFleet

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    fleet = SimFleet(state_dir=state_dir)
    with pytest.raises(UsageError, match=message):
        fleet.down()
    with pytest.raises(UsageError, match=message):
        fleet._check_state_dir()                       # what `up` runs before it writes anything
