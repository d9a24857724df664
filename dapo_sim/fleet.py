"""`dapo-sim up|status|down`: bring a simulated Ascend fleet on one Linux machine up and down, in order.

The steps live in their own modules: mirror (the artifact mirror), netns (bridges and each node's namespace),
node (a node's disk and its sshd PID 1), access (SSH files and inventory), preinstall (an installed HDK/CANN).
This module orders them and records what it started in <state dir>/fleet.json (state), each bridge, namespace, veth
and process in its ledger (ledger) right after it was made: `down` removes what the ledger records, nothing else.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

from dapo_ops.errors import UsageError
from dapo_sim.errors import SimError
from dapo_ops.manifest import StackManifest, load_manifest
from dapo_ops.paths import INVENTORY_DIR
from dapo_sim import access, bastion, hwmodel, ledger, mirror, netns, node
from dapo_sim.netns import BRIDGE, BRIDGE_IP, DATA_NIC, DATA_SUBNET, NETNS_PREFIX
from dapo_sim.node import exec_in
from dapo_sim.preinstall import preinstall
from dapo_sim.proc import alive, boot_id, port_open
from dapo_sim.state import FleetSpec, FleetState, NodeState

# Imported from here by the CLI, the tests and the benchmarks.
__all__ = ["BRIDGE", "DATA_NIC", "DATA_SUBNET", "NETNS_PREFIX", "FleetSpec", "FleetState", "NodeState", "SimFleet",
           "state_dir_default"]

SIM_INVENTORY_DIR = INVENTORY_DIR / "sim"   # the inventory `dapo-sim up` writes (hosts.yml beside groups.yml)
DEFAULT_STATE_DIR = Path("/var/lib/dapo-ops/sim")
MIRROR_PORT = 8765
MAX_NODES = 200
HOST_PARENTS_OF_STATE = ("/etc", "/usr", "/var/cache", "/opt", "/root", "/home", "/tmp", "/var/log",
                         "/data", "/dev", "/proc")


def state_dir_default() -> Path:
    return Path(os.environ.get("DAPO_OPS_SIM_DIR") or DEFAULT_STATE_DIR)


class SimFleet:
    def __init__(self, state_dir: Path | None = None, inventory_dir: Path | None = None,
                 manifest: StackManifest | None = None, log=None):
        self.state_dir = Path(state_dir or state_dir_default())
        self.inventory_dir = Path(inventory_dir or SIM_INVENTORY_DIR)
        self._manifest = manifest
        self.log = log or (lambda message: None)

    # ------------------------------------------------------------------------------------------- paths, state

    @property
    def manifest(self) -> StackManifest:
        if self._manifest is None:
            self._manifest = load_manifest()
        return self._manifest

    @property
    def state_file(self) -> Path:
        return self.state_dir / "fleet.json"

    @property
    def ssh_dir(self) -> Path:
        return self.state_dir / "ssh"

    @property
    def key_file(self) -> Path:
        return self.ssh_dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        return self.ssh_dir / "config"

    @property
    def bastion_dir(self) -> Path:
        return self.state_dir / "bastion"

    @property
    def mirror_root(self) -> Path:
        return self.state_dir / "mirror"

    @property
    def mirror_url(self) -> str:
        return f"http://{BRIDGE_IP}:{MIRROR_PORT}"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def inventory_file(self) -> Path:
        return self.inventory_dir / "hosts.yml"

    @property
    def fabric_dir(self) -> Path:
        """The fleet-wide RoCE fabric table (one entry per node), seen by every node at /dev/.dapo-sim/fabric."""
        return self.state_dir / "fabric"

    def load_state(self) -> FleetState | None:
        try:
            return FleetState.from_json(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            raise SimError(f"simulator state {self.state_file} is unreadable ({exc}): remove the fleet's namespaces, "
                           "links and processes yourself, then the file")

    def _save_state(self, state: FleetState) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(state.to_json())
        tmp.replace(self.state_file)

    # ------------------------------------------------------------------------------------------------ checks

    def _check_host(self) -> None:
        if os.geteuid() != 0:
            raise SimError("the simulated fleet needs root (network and mount namespaces)")
        missing = [tool for tool in ("ip", "unshare", "nsenter", "ssh-keygen", "git", "sha256sum")
                   if shutil.which(tool) is None]
        missing += [path for path in (node.SSHD, node.NODE_PYTHON) if not os.path.exists(path)]
        if missing:
            raise SimError(f"missing on this machine: {', '.join(missing)} "
                           "(apt-get install openssh-server iproute2 util-linux git python3 python3-venv)")
        self._check_state_dir()

    def _check_state_dir(self) -> None:
        """`up` writes under the state dir and `down` deletes its fixed subdirectories: both refuse one that is `/`
        or a top-level directory (`/var`), or one the nodes get their own copy of."""
        resolved = self.state_dir.resolve()
        if len(resolved.parts) < 3:
            raise UsageError(f"simulator state dir {resolved} must be a directory of its own, at least two levels "
                             f"below / (the default is {DEFAULT_STATE_DIR}); set DAPO_OPS_SIM_DIR elsewhere")
        for parent in HOST_PARENTS_OF_STATE:
            if str(resolved) == parent or str(resolved).startswith(parent + "/"):
                raise UsageError(f"simulator state dir {resolved} must not be under {parent} "
                                 "(the nodes get their own copy of it); set DAPO_OPS_SIM_DIR elsewhere")

    @staticmethod
    def validate_spec(spec: FleetSpec) -> list[hwmodel.Fault]:
        if not 1 <= spec.nodes <= MAX_NODES:
            raise UsageError(f"--nodes must be between 1 and {MAX_NODES} (got {spec.nodes})")
        if not 1 <= spec.npus_per_node <= 16:
            raise UsageError(f"--npus-per-node must be between 1 and 16 (got {spec.npus_per_node})")
        if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", spec.ssh_user):
            raise UsageError(f"--ssh-user {spec.ssh_user!r} is not a user name (lower-case letters, digits, _ and -)")
        if spec.ssh_user != "root" and any(line.split(":")[0] == spec.ssh_user or line.split(":")[2:3] == [
                str(node.SUDO_USER_ID)] for line in Path("/etc/passwd").read_text().splitlines() if line):
            raise UsageError(f"--ssh-user {spec.ssh_user}: this machine has that user or uid {node.SUDO_USER_ID} "
                             "already, which the nodes' copy of its account files would keep: pick another name")
        if spec.ssh_key and not (Path(spec.ssh_key).is_file() and Path(f"{spec.ssh_key}.pub").is_file()):
            raise UsageError(f"--ssh-key {spec.ssh_key}: needs the private key and {spec.ssh_key}.pub beside it")
        netns.check_link_mbit(spec.link_mbit)
        faults = [hwmodel.parse_fault(s) for s in spec.faults]
        hwmodel.validate_faults(faults, hwmodel.node_names(spec.nodes), spec.npus_per_node)
        return faults

    def client_key(self, spec: FleetSpec) -> Path:
        """The private key the inventory names and the nodes accept."""
        return Path(spec.ssh_key) if spec.ssh_key else self.key_file

    # -------------------------------------------------------------------------------------------------- up

    def up(self, spec: FleetSpec) -> FleetState:
        faults = self.validate_spec(spec)
        self._check_host()
        started = time.monotonic()
        current = self.load_state()
        if current is not None and current.spec == json.loads(json.dumps(asdict(spec))) and self._healthy(current):
            self.log(f"fleet of {spec.nodes} node(s) already up; nothing to do")
            self._write_inventory(current, spec)  # this checkout's inventory/sim too (the fleet may be another's)
            return current
        if current is not None:
            self.log("removing the previous simulated fleet")
            self.down()
        elif leftovers := netns.leftovers():  # not recorded: left alone (a name it needs that is taken fails it)
            self.log(f"named like the simulator's but not recorded by it, left alone: {leftovers}")
        for path in (self.state_dir, self.ssh_dir, self.logs_dir):
            path.mkdir(parents=True, exist_ok=True)
        for private in node.PRIVATE_DIRS:  # mount points for the nodes' own empty directories (normally all exist)
            Path("/", private).mkdir(parents=True, exist_ok=True)
        self.state_dir.chmod(0o700)

        self.log("preparing the artifact mirror (wheels are cached after the first run)")
        mirror.prepare(self.mirror_root, self.state_dir / "cache", self.manifest, self.logs_dir / "mirror-build.log")
        access.ensure_client_key(self.key_file)
        state = FleetState(spec=asdict(spec), nodes=self._plan_nodes(spec.nodes), mirror_url=self.mirror_url,
                           created_at=time.time(), boot_id=boot_id())
        self._save_state(state)  # written first, and again as each thing is made: `down` cleans up after a crash
        try:
            self._bring_up(state, spec, faults)
        except BaseException:
            self.log("bring-up failed; tearing down what was started")
            try:
                self.down()
            except SimError as exc:
                self.log(f"teardown after the failed bring-up also failed: {exc}")
            raise
        state.up_seconds = round(time.monotonic() - started, 2)
        self._save_state(state)
        return state

    def _plan_nodes(self, count: int) -> list[NodeState]:
        return [NodeState(name=name, index=index, ip=netns.node_ip(index), netns=f"{NETNS_PREFIX}{name}",
                          veth_host=f"dapo{index}h", veth_node=f"dapo{index}n",
                          dir=str(self.state_dir / "nodes" / name), data_ip=netns.node_data_ip(index),
                          veth_data_host=f"dapo{index}d")
                for index, name in enumerate(hwmodel.node_names(count), 1)]

    def _bring_up(self, state: FleetState, spec: FleetSpec, faults: list[hwmodel.Fault]) -> None:
        record = ledger.Recorder(state, self._save_state)
        netns.make_bridges(record, spec.link_mbit)
        state.mirror_pid = mirror.start(self.mirror_root, BRIDGE_IP, MIRROR_PORT, self.logs_dir / "mirror.log",
                                        record)
        self._save_state(state)
        client_public_key = Path(f"{self.client_key(spec)}.pub")
        if spec.bastion:
            bastion.start(self.bastion_dir, client_public_key, record, self.logs_dir / "bastion.log")
        for n in state.nodes:
            node.prepare(n, node_count=spec.nodes, npus_per_node=spec.npus_per_node, faults=faults,
                         manifest=self.manifest, client_public_key=client_public_key,
                         fabric=self.fabric_dir, hide=self.state_dir, ssh_user=spec.ssh_user,
                         jump_ip=bastion.IP if spec.bastion else None)
            netns.add_node(n, record, spec.link_mbit)
            node.start(n, record)
        node.wait_for_sshd(state.nodes)
        jump = self.bastion_dir if spec.bastion else None
        access.write_known_hosts(state.nodes, self.known_hosts, jump)
        access.write_ssh_config(state.nodes, self.ssh_config, self.client_key(spec), self.known_hosts,
                                spec.ssh_user, jump is not None)
        preinstall(state.nodes, spec, faults, self.manifest, self.state_dir / "catalog-installers", self.mirror_root)
        self._write_inventory(state, spec)

    def _write_inventory(self, state: FleetState, spec: FleetSpec) -> None:
        access.write_inventory(self.inventory_file, state.nodes, spec.npus_per_node, key_file=self.client_key(spec),
                               known_hosts=self.known_hosts, mirror_url=self.mirror_url,
                               mirror_root=self.mirror_root, manifest=self.manifest, ssh_user=spec.ssh_user,
                               ssh_config=self.ssh_config if spec.bastion else None)

    # ------------------------------------------------------------------------------------------ in the nodes

    def exec_in_node(self, node: NodeState, command: list[str], timeout: float = 120,
                     env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run a command inside a node (all its namespaces), as its own processes would."""
        return exec_in(node, command, timeout=timeout, env=env)

    # ---------------------------------------------------------------------------------------------- status

    def _healthy(self, state: FleetState) -> bool:
        jump_up = not state.spec.get("bastion") or port_open(bastion.IP, 22)
        return all(alive(n.pid1) and port_open(n.ip, 22) for n in state.nodes) and alive(state.mirror_pid) and jump_up

    def status(self) -> dict:
        state = self.load_state()
        if state is None:
            return {"up": False, "nodes": [], "leftovers": netns.leftovers()}
        nodes = []
        for n in state.nodes:
            nodes.append({
                "name": n.name, "ip": n.ip, "data_ip": n.data_ip, "data_nic": DATA_NIC, "netns": n.netns,
                "netns_exists": n.netns in netns.netns_list(), "pid1_alive": alive(n.pid1),
                "sshd": port_open(n.ip, 22) if alive(n.pid1) else False,
            })
        return {
            "up": all(n["sshd"] for n in nodes) and alive(state.mirror_pid),
            "spec": state.spec, "nodes": nodes,
            "mirror": {"url": state.mirror_url, "alive": alive(state.mirror_pid)},
            "inventory": str(self.inventory_file), "known_hosts": str(self.known_hosts),
            "ssh_config": str(self.ssh_config), "up_seconds": state.up_seconds,
        }

    # ------------------------------------------------------------------------------------------------ down

    def down(self) -> dict[str, list[str]]:
        """Remove the fleet: what its ledger records (node processes, namespaces, veths, bridges, the mirror) while
        still the very thing recorded, then the node disks and the access files. A second `down` finds nothing."""
        if os.geteuid() != 0:
            raise SimError("the simulated fleet needs root (network and mount namespaces)")
        self._check_state_dir()
        removed: dict[str, list[str]] = {"processes": [], "netns": [], "links": []}
        state = self.load_state()
        if state is not None:
            ledger.teardown(state, removed)
        shutil.rmtree(self.state_dir / "nodes", ignore_errors=True)
        shutil.rmtree(self.fabric_dir, ignore_errors=True)
        shutil.rmtree(self.bastion_dir, ignore_errors=True)
        for path in (self.state_file, self.inventory_file, self.known_hosts, self.ssh_config):
            if path.exists():
                path.unlink()
        return removed
