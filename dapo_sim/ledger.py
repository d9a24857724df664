"""The fleet's ledger: each bridge, namespace, veth pair and process `sim up` made, recorded in fleet.json right
after it was made, and the teardown that removes exactly those, and only while they are still the ones recorded.

A process is known by its PID and start time, a namespace by its inode, a link by its ifindex (state.Resource), so
neither a recycled PID nor a namesake that someone else made later is touched. Nothing is removed by a name prefix.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

from dapo_sim import netns
from dapo_sim.netns import BRIDGE, DATA_BRIDGE
from dapo_sim.proc import boot_id, boot_time, kill_if_ours, start_time, wait_gone
from dapo_sim.state import FleetState, Resource

# an older fleet.json (no ledger) has no start times: its processes are known by these, as before the ledger
SSHD_MARKER = "dapo_sshd_config"
MIRROR_MARKER = "dapo_sim.mirror"


class Recorder:
    """record(kind, name, pid=None): add what was just made to the state's ledger and save the state at once, so
    that a bring-up that dies half-way leaves a ledger of everything it made."""

    def __init__(self, state: FleetState, save: Callable[[FleetState], None]):
        self.state, self.save = state, save
        if state.ledger is None:
            state.ledger = []

    def __call__(self, kind: str, name: str, pid: int | None = None) -> None:
        ident = start_time(pid) if kind == "process" else netns.identity(kind, name)
        self.state.ledger.append(Resource(kind=kind, name=name, pid=pid, ident=ident))
        self.save(self.state)


def resources(state: FleetState) -> list[Resource]:
    """The ledger; for a fleet.json written before there was one, what its fields show was made for sure."""
    return state.ledger if state.ledger is not None else _from_older_state(state)


def _from_older_state(state: FleetState) -> list[Resource]:
    """Before the ledger, `sim up` made the bridges before it started the mirror, and a node's namespace and veths
    before it started the node's processes: those were made if the mirror, or the node's process, was recorded."""
    made: list[Resource] = []
    if state.mirror_pid:
        made += [Resource("bridge", BRIDGE), Resource("bridge", DATA_BRIDGE),
                 Resource("process", "mirror", pid=state.mirror_pid, marker=MIRROR_MARKER)]
    for n in state.nodes:
        if n.unshare_pid:
            made += [Resource("netns", n.netns), Resource("link", n.veth_host),
                     Resource("process", f"{n.name}/unshare", pid=n.unshare_pid, marker=n.dir)]
            made += [Resource("link", n.veth_data_host)] if n.veth_data_host else []
        if n.pid1:
            made.append(Resource("process", f"{n.name}/pid1", pid=n.pid1, marker=SSHD_MARKER))
    return made


def _this_boot(state: FleetState) -> bool:
    """A reboot ended every process, namespace and link of the ledger: any namesake now is someone else's."""
    if state.boot_id:
        return state.boot_id == boot_id()
    return state.created_at >= boot_time()


def teardown(state: FleetState, removed: dict[str, list[str]]) -> None:
    """Remove what the ledger records, newest first: the processes (a node's PID 1 takes its PID namespace, so the
    whole node, with it), then the veths, namespaces and bridges. What is gone already is skipped."""
    if not _this_boot(state):
        return
    made = list(reversed(resources(state)))
    signalled = []
    for r in (r for r in made if r.kind == "process"):
        sig = signal.SIGTERM if r.name == "mirror" else signal.SIGKILL
        if kill_if_ours(r.pid, r.ident, sig, r.marker):
            signalled.append(r.pid)
            removed["processes"].append(f"{r.name}:{r.pid}")
    wait_gone(signalled)
    for r in (r for r in made if r.kind != "process"):
        if netns.remove(r.kind, r.name, r.ident):
            removed["netns" if r.kind == "netns" else "links"].append(r.name)
