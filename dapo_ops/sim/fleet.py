"""`dapo-ops sim up|status|down`: a simulated Ascend fleet on one Linux machine.

Each node is a network namespace on a private bridge, a PID/UTS/mount namespace with its own /etc,
/usr/local (so /usr/local/Ascend) and /usr/src (overlays on the host's), its own empty /opt, /root, /home,
/tmp, /var/log, and /dev (with /dev/davinciK for its NPUs and the hardware model at /dev/.dapo-sim), and a real OpenSSH sshd as
its PID 1. Stopping the node is killing that PID 1: the kernel then kills everything else in the node.
Practical findings behind this layout: shared/reference/lab-and-ops.md §3 and its appendix.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import jinja2
import yaml

from dapo_ops.errors import SimError, UsageError
from dapo_ops.manifest import StackManifest, load_manifest
from dapo_ops.paths import SIM_INVENTORY_DIR
from dapo_ops.sim import artifacts, hwmodel, mirror, netns, repos
from dapo_ops.sim.netns import BRIDGE, BRIDGE_IP, DATA_NIC, DATA_SUBNET, NETNS_PREFIX, SUBNET
from dapo_ops.sim.proc import alive, children, kill_if_ours, port_open, run, wait_gone

DEFAULT_STATE_DIR = Path("/var/lib/dapo-ops/sim")
MIRROR_PORT = 8765
MAX_NODES = 200
OVERLAYS = ("etc", "usr/local", "usr/src", "var/cache")     # the node sees the host's files and writes its own copy
# /var/lib too, mounted last: the binds from the state dir (which lives under /var/lib) are made before it
LATE_OVERLAYS = ("var/lib",)
# The node starts with these empty (/data: models and datasets, staged on every node like on a real cluster).
PRIVATE_DIRS = ("opt", "root", "home", "tmp", "var/log", "data")
HOST_PARENTS_OF_STATE = ("/etc", "/usr/local", "/usr/src", "/var/cache", "/opt", "/root", "/home", "/tmp", "/var/log",
                         "/data", "/dev", "/proc")
SSHD = "/usr/sbin/sshd"
NODE_PYTHON = "/usr/bin/python3"
EMU_NAME = "ascend_emu.py"
BOOT_TIME_COMMAND = "cat /dev/.dapo-sim/boot_id"
REBOOT_COMMAND = "/usr/local/sbin/sim-reboot"
# sshd re-executes itself for every connection, so its files must be paths of the node's own view (its /etc).
SSHD_CONFIG = "/etc/ssh/dapo_sshd_config"
HOST_KEY = "dapo_host_ed25519_key"
AUTHORIZED_KEYS = "dapo_authorized_keys"

_templates = jinja2.Environment(loader=jinja2.FileSystemLoader(artifacts.ASSETS), undefined=jinja2.StrictUndefined,
                                keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)
_templates.filters["shquote"] = lambda value: shlex.quote(str(value))


def state_dir_default() -> Path:
    return Path(os.environ.get("DAPO_OPS_SIM_DIR") or DEFAULT_STATE_DIR)


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
    def mirror_root(self) -> Path:
        return self.state_dir / "mirror"

    @property
    def mirror_url(self) -> str:
        return f"http://{BRIDGE_IP}:{MIRROR_PORT}"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    def load_state(self) -> FleetState | None:
        try:
            return FleetState.from_json(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            raise SimError(f"simulator state {self.state_file} is unreadable ({exc}); run `dapo-ops sim down`")

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
        missing += [path for path in (SSHD, NODE_PYTHON) if not os.path.exists(path)]
        if missing:
            raise SimError(f"missing on this machine: {', '.join(missing)} "
                           "(apt-get install openssh-server iproute2 util-linux git python3 python3-venv)")
        resolved = str(self.state_dir.resolve())
        for parent in HOST_PARENTS_OF_STATE:
            if resolved == parent or resolved.startswith(parent + "/"):
                raise UsageError(f"simulator state dir {resolved} must not be under {parent} "
                                 "(the nodes get their own copy of it); set DAPO_OPS_SIM_DIR elsewhere")

    @staticmethod
    def validate_spec(spec: FleetSpec) -> list[hwmodel.Fault]:
        if not 1 <= spec.nodes <= MAX_NODES:
            raise UsageError(f"--nodes must be between 1 and {MAX_NODES} (got {spec.nodes})")
        if not 1 <= spec.npus_per_node <= 16:
            raise UsageError(f"--npus-per-node must be between 1 and 16 (got {spec.npus_per_node})")
        faults = [hwmodel.parse_fault(s) for s in spec.faults]
        hwmodel.validate_faults(faults, hwmodel.node_names(spec.nodes), spec.npus_per_node)
        return faults

    # -------------------------------------------------------------------------------------------------- up

    def up(self, spec: FleetSpec) -> FleetState:
        faults = self.validate_spec(spec)
        self._check_host()
        started = time.monotonic()
        current = self.load_state()
        if current is not None and current.spec == json.loads(json.dumps(asdict(spec))) and self._healthy(current):
            self.log(f"fleet of {spec.nodes} node(s) already up; nothing to do")
            return current
        if current is not None or netns.leftovers():
            self.log("removing the previous simulated fleet")
            self.down()
        for path in (self.state_dir, self.ssh_dir, self.logs_dir):
            path.mkdir(parents=True, exist_ok=True)
        for private in PRIVATE_DIRS:  # mount points for the nodes' own empty directories (normally all exist)
            Path("/", private).mkdir(parents=True, exist_ok=True)
        self.state_dir.chmod(0o700)

        self.log("preparing the artifact mirror (wheels are cached after the first run)")
        mirror.prepare(self.mirror_root, self.state_dir / "cache", self.manifest, self.logs_dir / "mirror-build.log")
        self._ensure_client_key()

        nodes = []
        for index, name in enumerate(hwmodel.node_names(spec.nodes), 1):
            nodes.append(NodeState(
                name=name, index=index, ip=f"{SUBNET}.{10 + index}", netns=f"{NETNS_PREFIX}{name}",
                veth_host=f"dapo{index}h", veth_node=f"dapo{index}n",
                dir=str(self.state_dir / "nodes" / name), data_ip=f"{DATA_SUBNET}.{10 + index}",
                veth_data_host=f"dapo{index}d"))
        state = FleetState(spec=asdict(spec), nodes=nodes, mirror_url=self.mirror_url, created_at=time.time())
        self._save_state(state)  # written first, so `down` can clean up after a crashed `up`
        try:
            netns.make_bridges()
            state.mirror_pid = self._start_mirror()
            self._save_state(state)
            for node in nodes:
                self._prepare_node(node, spec, faults)
                self._start_node(node)
                self._save_state(state)
            self._wait_for_sshd(nodes)
            self._write_known_hosts(nodes)
            self._preinstall(nodes, spec, faults)
            self._write_inventory(nodes, spec)
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

    def _ensure_client_key(self) -> None:
        if not self.key_file.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dapo-ops-sim", "-f", str(self.key_file)],
                 "create the controller SSH key")
        self.key_file.chmod(0o600)

    def _start_mirror(self) -> int:
        log = open(self.logs_dir / "mirror.log", "ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "dapo_ops.sim.mirror", "--root", str(self.mirror_root), "--bind", BRIDGE_IP,
             "--port", str(MIRROR_PORT)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])))
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if port_open(BRIDGE_IP, MIRROR_PORT):
                return proc.pid
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        raise SimError(f"the artifact mirror did not start; see {self.logs_dir / 'mirror.log'}")

    def _prepare_node(self, node: NodeState, spec: FleetSpec, faults: list[hwmodel.Fault]) -> None:
        d = Path(node.dir)
        if d.exists():
            shutil.rmtree(d)
        for sub in ("hw", "devstage", *(p.replace("/", "_") for p in PRIVATE_DIRS)):
            (d / sub).mkdir(parents=True)
        (d / "tmp").chmod(0o1777)
        (d / "root").chmod(0o700)
        for overlay in OVERLAYS + LATE_OVERLAYS:
            key = overlay.replace("/", "_")
            (d / "upper" / key).mkdir(parents=True)
            (d / "work" / key).mkdir(parents=True)
        etc = d / "upper" / "etc"
        ssh = etc / "ssh"
        ssh.mkdir()
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{node.name}", "-f", str(ssh / HOST_KEY)],
             f"create {node.name}'s host key")
        shutil.copyfile(self.key_file.with_suffix(".pub"), ssh / AUTHORIZED_KEYS)
        (ssh / Path(SSHD_CONFIG).name).write_text(_templates.get_template("sshd_config.j2").render(
            ip=node.ip, host_key=f"/etc/ssh/{HOST_KEY}", authorized_keys=f"/etc/ssh/{AUTHORIZED_KEYS}"))
        (etc / "hostname").write_text(node.name + "\n")
        hosts = ["127.0.0.1 localhost", f"{BRIDGE_IP} mirror"]
        hosts += [f"{SUBNET}.{10 + i} node{i}" for i in range(1, spec.nodes + 1)]
        (etc / "hosts").write_text("\n".join(hosts) + "\n")
        (etc / "resolv.conf").write_text("options timeout:1 attempts:1\n")  # no DNS: fail fast, never stall

        sbin = d / "upper" / "usr_local" / "sbin"
        sbin.mkdir(parents=True)
        for tool in ("lspci", "sim-reboot", "dkms"):
            (sbin / tool).symlink_to("/dev/.dapo-sim/run")
        # the node image's kernel headers, which the driver's DKMS build needs (nothing is compiled here)
        headers = d / "upper" / "usr_src" / f"linux-headers-{os.uname().release}"
        headers.mkdir(parents=True)
        (headers / "Makefile").write_text(f"# kernel headers stand-in for {os.uname().release}\n")

        catalog = artifacts.load_catalog()
        model = hwmodel.build_node_model(
            node.name, node.index, spec.npus_per_node, faults, chip_name=self.manifest.platform["chip_name"],
            hbm_mb=int(self.manifest.platform["hbm_mb"]), factory_firmware=catalog["factory_firmware"],
            mcu_version=catalog["mcu_version"])
        (d / "hw" / "hw.json").write_text(json.dumps(model, indent=1, sort_keys=True))
        # the fleet-wide RoCE fabric table (one entry per node), seen by every node at /dev/.dapo-sim/fabric
        (d / "hw" / "fabric").mkdir()
        (self.state_dir / "fabric").mkdir(exist_ok=True)
        (self.state_dir / "fabric" / f"{node.name}.json").write_text(json.dumps(hwmodel.fabric_entry(model)))
        (d / "hw" / "boot_id").write_text(model["boot_id"] + "\n")
        shutil.copyfile(artifacts.ASSETS / EMU_NAME, d / "hw" / EMU_NAME)
        shutil.copyfile(artifacts.ASSETS / "run.sh", d / "hw" / "run")
        (d / "hw" / "run").chmod(0o755)

        conf = []
        for npu in model["npus"]:
            if npu["present"] and npu["device_ip"]:
                conf += [f"address_{npu['id']}={npu['device_ip']}", f"netmask_{npu['id']}={npu['netmask']}"]
        (etc / "hccn.conf").write_text("\n".join(conf) + "\n" if conf else "")
        present = [n["id"] for n in model["npus"] if n["present"]]
        (d / "init.sh").write_text(self._init_script(node, d, present))

    @staticmethod
    def _init_script(node: NodeState, d: Path, npus: list[int]) -> str:
        """The node's PID 1: its mounts (overlays, private dirs, /dev), then sshd in the foreground."""
        def overlay(path: str) -> dict[str, str]:
            key = path.replace("/", "_")
            return {"key": key, "path": f"/{path}", "upper": f"{d}/upper/{key}", "work": f"{d}/work/{key}"}

        return _templates.get_template("node_init.sh.j2").render(
            name=node.name, overlays=[overlay(o) for o in OVERLAYS],
            late_overlays=[overlay(o) for o in LATE_OVERLAYS],
            private_binds=[{"source": f"{d}/{p.replace('/', '_')}", "target": f"/{p}"} for p in PRIVATE_DIRS],
            dev=f"{d}/devstage", hw=f"{d}/hw", fabric=f"{d.parent.parent}/fabric",
            davinci=[f"davinci{k}" for k in npus], sshd=SSHD, sshd_config=SSHD_CONFIG)

    def _start_node(self, node: NodeState) -> None:
        netns.add_node(node)
        log = open(Path(node.dir) / "init.log", "ab")
        proc = subprocess.Popen(
            ["ip", "netns", "exec", node.netns, "unshare", "--uts", "--pid", "--mount", "--fork", "--kill-child",
             "--propagation", "private", "--mount-proc", "/bin/sh", str(Path(node.dir) / "init.sh")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        node.unshare_pid = proc.pid
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not node.pid1:
            kids = children(proc.pid)
            node.pid1 = kids[0] if kids else None
            if proc.poll() is not None:
                break
            time.sleep(0.01)
        if not node.pid1:
            raise SimError(f"{node.name} did not start; see {node.dir}/init.log")

    def _wait_for_sshd(self, nodes: list[NodeState], timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        pending = list(nodes)
        while pending and time.monotonic() < deadline:
            pending = [n for n in pending if not port_open(n.ip, 22)]
            for node in pending:
                if not alive(node.pid1):
                    tail = (Path(node.dir) / "init.log").read_text(errors="replace").strip().splitlines()[-3:]
                    raise SimError(f"{node.name} stopped while starting: {' | '.join(tail) or 'no output'}")
            if pending:
                time.sleep(0.05)
        if pending:
            raise SimError(f"sshd did not come up on {', '.join(n.name for n in pending)} in {timeout:.0f} s")

    def _write_known_hosts(self, nodes: list[NodeState]) -> None:
        lines = []
        for node in nodes:
            pub = (Path(node.dir) / "upper/etc/ssh" / f"{HOST_KEY}.pub").read_text().split()
            lines.append(f"{node.ip} {pub[0]} {pub[1]}")
        self.known_hosts.write_text("\n".join(lines) + "\n")
        config = []
        for node in nodes:
            config += [f"Host {node.name} {node.ip}", f"  HostName {node.ip}", "  User root",
                       f"  IdentityFile {self.key_file}", "  IdentitiesOnly yes",
                       f"  UserKnownHostsFile {self.known_hosts}", "  StrictHostKeyChecking yes",
                       "  ConnectTimeout 5", ""]
        self.ssh_config.write_text("\n".join(config))

    # ------------------------------------------------------------------------------------------ preinstall

    def stage(self, files: dict[str, bytes], skip: tuple[str, ...] = ()) -> list[str]:
        """Write job files (absolute /data paths) into every node's own /data but the `skip` ones."""
        from dapo_ops.sim.stage import node_path

        state = self.load_state()
        if state is None:
            raise SimError("no simulated fleet is up (dapo-ops sim up)")
        unknown = sorted(set(skip) - {n.name for n in state.nodes})
        if unknown:
            raise UsageError(f"--skip {', '.join(unknown)}: not a node of this fleet")
        staged = []
        for node in state.nodes:
            if node.name in skip:
                continue
            for path, data in files.items():
                target = node_path(Path(node.dir), path)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            staged.append(node.name)
        return staged

    def exec_in_node(self, node: NodeState, command: list[str], timeout: float = 120,
                     env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run a command inside a node (all its namespaces), as its own processes would."""
        base_env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
                    "LANG": "C.UTF-8"}
        return subprocess.run(["nsenter", "-t", str(node.pid1), "-m", "-u", "-p", "-n", "--", *command],
                              capture_output=True, text=True, timeout=timeout, env={**base_env, **(env or {})})

    def _preinstall(self, nodes: list[NodeState], spec: FleetSpec, faults: list[hwmodel.Fault]) -> None:
        """Start nodes on an already installed HDK/CANN when --provisioned or a fault knob asks for one."""
        catalog = artifacts.load_catalog()
        firmware_driver = {fw: info["package_version"] for fw, info in catalog["firmwares"].items()}
        pinned = {k: self.manifest.artifact(k).version for k in ("driver", "firmware")}
        firmware_driver[pinned["firmware"]] = pinned["driver"]
        build_dir = self.state_dir / "catalog-installers"
        build_dir.mkdir(exist_ok=True)
        for node in nodes:
            start = hwmodel.hdk_start(node.name, faults, spec.provisioned, pinned["driver"], pinned["firmware"],
                                      firmware_driver)
            steps: list[tuple[list[str], dict]] = []
            for component, version, flags in (("driver", start.driver, ["--full", "--install-for-all"]),
                                              ("firmware", start.firmware, ["--full"])):
                if version is None:
                    continue
                package = artifacts.catalog_package(self.manifest, component, version)
                path = build_dir / package.file
                path.write_bytes(artifacts.build(package))
                steps.append((["bash", str(path), *flags, "--quiet", "--nox11"], {}))
            if steps:
                steps.append(([REBOOT_COMMAND], {}))
            if start.half_installed:
                steps.append((["rm", "-f", "/usr/local/Ascend/driver/tools/upgrade-tool"], {}))
            if spec.provisioned:
                art = mirror.MirrorLayout(self.mirror_root).artifacts
                toolkit_env = {"ASCEND_TOOLKIT_HOME": "/usr/local/Ascend/ascend-toolkit/latest"}
                steps += [
                    (["bash", str(art / self.manifest.artifact("cann_toolkit").file), "--full", "--quiet"], {}),
                    (["bash", str(art / self.manifest.artifact("cann_kernels").file), "--install", "--quiet"], {}),
                    (["bash", str(art / self.manifest.artifact("cann_nnal").file), "--install", "--quiet"],
                     toolkit_env),
                ]
            for command, env in steps:
                result = self.exec_in_node(node, command, env=env)
                if result.returncode not in (0, 2):
                    out = (result.stdout + result.stderr).strip().splitlines()
                    raise SimError(f"preinstall on {node.name} failed ({' '.join(command[:2])}): "
                                   f"{out[-1] if out else result.returncode}")
            extra = hwmodel.installer_faults(node.name, faults)
            if extra:
                hw_file = Path(node.dir) / "hw" / "hw.json"
                model = json.loads(hw_file.read_text())
                model["faults"].update(extra)
                hw_file.write_text(json.dumps(model, indent=1, sort_keys=True))

    # ------------------------------------------------------------------------------------------- inventory

    def _write_inventory(self, nodes: list[NodeState], spec: FleetSpec) -> None:
        """inventory/sim/hosts.yml: the nodes plus the connection and artifact-source variables."""
        inventory = {
            "all": {
                "children": {
                    "npu_nodes": {
                        "hosts": {n.name: {"ansible_host": n.ip, "dapo_hccl_ifname": DATA_NIC} for n in nodes},
                    },
                },
                "vars": {
                    "ansible_user": "root",
                    "ansible_ssh_private_key_file": str(self.key_file),
                    "ansible_ssh_common_args": (f"-o UserKnownHostsFile={self.known_hosts} "
                                                "-o StrictHostKeyChecking=yes"),
                    "ansible_python_interpreter": NODE_PYTHON,
                    "dapo_known_hosts": str(self.known_hosts),
                    "npus_per_node": spec.npus_per_node,
                    "dapo_artifact_url": f"{self.mirror_url}/artifacts",
                    "dapo_pip_index_url": f"{self.mirror_url}/simple",
                    "dapo_pip_trusted_host": BRIDGE_IP,
                    "dapo_git_base_url": f"{self.mirror_url}/git",
                    # the nodes' lock, with the stand-in wheels' hashes for the NPU-bound packages
                    "dapo_stack_lock": str(mirror.MirrorLayout(self.mirror_root).lock),
                    # byte-compiling the ~200 locked packages costs a 2-core host ~25 s per node
                    "dapo_pip_compile": False,
                    # the commits the mirror's stand-in repositories carry at the pinned tags
                    "dapo_source_commits": repos.tag_commits(mirror.MirrorLayout(self.mirror_root).git,
                                                             self.manifest),
                    "dapo_reboot_command": REBOOT_COMMAND,
                    "dapo_boot_time_command": BOOT_TIME_COMMAND,
                },
            }
        }
        self.inventory_dir.mkdir(parents=True, exist_ok=True)
        header = ("# Written by `dapo-ops sim up` for the simulated fleet; rewritten on every `sim up`.\n"
                  "# Do not edit: change the simulator's options instead.\n")
        target = self.inventory_dir / "hosts.yml"
        tmp = target.with_suffix(".tmp")
        tmp.write_text(header + yaml.safe_dump(inventory, sort_keys=False))
        tmp.replace(target)

    # ---------------------------------------------------------------------------------------------- status

    def _healthy(self, state: FleetState) -> bool:
        return all(alive(n.pid1) and port_open(n.ip, 22) for n in state.nodes) and alive(state.mirror_pid)

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
            "inventory": str(self.inventory_dir / "hosts.yml"), "known_hosts": str(self.known_hosts),
            "ssh_config": str(self.ssh_config), "up_seconds": state.up_seconds,
        }

    # ------------------------------------------------------------------------------------------------ down

    def down(self) -> dict[str, list[str]]:
        """Remove every trace of the fleet: node processes, namespaces, links, the mirror, the node disks."""
        if os.geteuid() != 0:
            raise SimError("the simulated fleet needs root (network and mount namespaces)")
        removed: dict[str, list[str]] = {"processes": [], "netns": [], "links": []}
        state = self.load_state()
        if state is not None:
            for node in state.nodes:
                for pid, marker in ((node.pid1, Path(SSHD_CONFIG).name), (node.unshare_pid, node.dir)):
                    if kill_if_ours(pid, marker, signal.SIGKILL):
                        removed["processes"].append(f"{node.name}:{pid}")
            if kill_if_ours(state.mirror_pid, "dapo_ops.sim.mirror", signal.SIGTERM):
                removed["processes"].append(f"mirror:{state.mirror_pid}")
        netns.remove_namespaces(removed)
        netns.remove_links(removed)
        if state is not None:
            wait_gone([p for n in state.nodes for p in (n.pid1, n.unshare_pid) if p] +
                      ([state.mirror_pid] if state.mirror_pid else []))
        shutil.rmtree(self.state_dir / "nodes", ignore_errors=True)
        shutil.rmtree(self.state_dir / "fabric", ignore_errors=True)
        for path in (self.state_file, self.inventory_dir / "hosts.yml", self.known_hosts, self.ssh_config):
            if path.exists():
                path.unlink()
        return removed
