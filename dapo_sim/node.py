"""One simulated node: its disk (private dirs, overlays, /etc, hardware model), its PID 1, running commands in it.

A node is a PID/UTS/mount namespace inside its network namespace. It gets its own /etc, /usr (so /usr/local/Ascend,
/usr/src and what its package manager installs), /var/cache and /var/lib (overlays on the host's: the node starts
as the host's image and writes its own copy), its own empty /opt, /root, /home,
/tmp, /var/log and /data, and its own /dev (with /dev/davinciK for its NPUs and the hardware model at
/dev/.dapo-sim). Its PID 1 is a real OpenSSH sshd; killing that PID 1 stops the node, since the kernel then kills
everything else in its PID namespace (`unshare --fork` itself ignores SIGTERM while it waits for its child).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import jinja2

from dapo_sim.errors import SimError
from dapo_ops.manifest import StackManifest
from dapo_sim import artifacts, hwmodel
from dapo_sim.netns import BRIDGE_IP, node_ip
from dapo_sim.proc import alive, children, port_open, run
from dapo_sim.state import NodeState

OVERLAYS = ("etc", "usr", "var/cache")     # the node sees the host's files and writes its own copy
# /var/lib too, mounted last: the binds from the state dir (which lives under /var/lib) are made before it
LATE_OVERLAYS = ("var/lib",)
# The node starts with these empty (/data: models and datasets, staged on every node like on a real cluster).
PRIVATE_DIRS = ("opt", "root", "home", "tmp", "var/log", "data")
SSHD = "/usr/sbin/sshd"
NODE_PYTHON = "/usr/bin/python3"
# the emulated reboot (a new boot id, pending firmware activated) and how Ansible's reboot module sees it
REBOOT_COMMAND = "/usr/local/sbin/sim-reboot"
BOOT_TIME_COMMAND = "cat /dev/.dapo-sim/boot_id"
EMU_NAME = "ascend_emu.py"
# sshd re-executes itself for every connection, so its files must be paths of the node's own view (its /etc).
SSHD_CONFIG = "/etc/ssh/dapo_sshd_config"
HOST_KEY = "dapo_host_ed25519_key"
AUTHORIZED_KEYS = "dapo_authorized_keys"
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_templates = jinja2.Environment(loader=jinja2.FileSystemLoader(artifacts.ASSETS), undefined=jinja2.StrictUndefined,
                                keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)
_templates.filters["shquote"] = lambda value: shlex.quote(str(value))


def _key(path: str) -> str:
    """A node-root path's directory name in the node dir (var/log -> var_log)."""
    return path.replace("/", "_")


def host_public_key(node: NodeState) -> Path:
    return Path(node.dir) / "upper/etc/ssh" / f"{HOST_KEY}.pub"


# ------------------------------------------------------------------------------------------------------ disk

def prepare(node: NodeState, *, node_count: int, npus_per_node: int, faults: list[hwmodel.Fault],
            manifest: StackManifest, client_public_key: Path, fabric: Path, hide: Path, ssh_user: str = "root",
            jump_ip: str | None = None) -> None:
    """Write the node's directory from scratch; `fabric` is the fleet-wide RoCE table every node sees, `hide` the
    simulator's state dir, which the node sees empty. SSH lets in ssh_user only (from jump_ip only, when given)."""
    d = Path(node.dir)
    if d.exists():
        shutil.rmtree(d)
    _make_dirs(d)
    etc = d / "upper" / "etc"
    _write_ssh(node, etc / "ssh", client_public_key, ssh_user, jump_ip)
    _write_etc(node, etc, node_count)
    if ssh_user != "root":
        _write_sudo_user(etc, d / _key("home"), ssh_user)
    _write_usr(d)
    model = _write_hardware(node, d, npus_per_node, faults, manifest, fabric)
    conf = []
    for npu in model["npus"]:
        if npu["present"] and npu["device_ip"]:
            conf += [f"address_{npu['id']}={npu['device_ip']}", f"netmask_{npu['id']}={npu['netmask']}"]
    (etc / "hccn.conf").write_text("\n".join(conf) + "\n" if conf else "")
    present = [n["id"] for n in model["npus"] if n["present"]]
    (d / "meminfo").write_text(hwmodel.meminfo(Path("/proc/meminfo").read_text(), model["host_mem_gib"]))
    (d / "init.sh").write_text(init_script(node, present, fabric, hide, model["host_mem_gib"],
                                           model.get("disk_gib", hwmodel.SIM_DISK_GIB)))


def _make_dirs(d: Path) -> None:
    for sub in ("hw", "devstage", *(_key(p) for p in PRIVATE_DIRS)):
        (d / sub).mkdir(parents=True)
    (d / "tmp").chmod(0o1777)
    (d / "root").chmod(0o700)
    for overlay in OVERLAYS + LATE_OVERLAYS:
        (d / "upper" / _key(overlay)).mkdir(parents=True)
        (d / "work" / _key(overlay)).mkdir(parents=True)


def _write_ssh(node: NodeState, ssh: Path, client_public_key: Path, ssh_user: str, jump_ip: str | None) -> None:
    ssh.mkdir()
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{node.name}", "-f", str(ssh / HOST_KEY)],
        f"create {node.name}'s host key")
    shutil.copyfile(client_public_key, ssh / AUTHORIZED_KEYS)
    (ssh / Path(SSHD_CONFIG).name).write_text(sshd_config(node, ssh_user, jump_ip))


SUDO_USER_ID = 2000


def _write_sudo_user(etc: Path, home: Path, user: str) -> None:
    """A login user with passwordless sudo, as sites that allow no root login have: the host's account files with
    the user added (in the node's /etc overlay), its home, and a sudoers.d entry."""
    for name, line in (("passwd", f"{user}:x:{SUDO_USER_ID}:{SUDO_USER_ID}::/home/{user}:/bin/bash"),
                       ("group", f"{user}:x:{SUDO_USER_ID}:"), ("shadow", f"{user}:*:19000:0:99999:7:::")):
        host = Path("/etc", name).read_text()
        (etc / name).write_text(host + ("" if host.endswith("\n") else "\n") + line + "\n")
    (etc / "shadow").chmod(0o640)
    sudoers = etc / "sudoers.d"
    sudoers.mkdir()
    (sudoers / "dapo-sim").write_text(f"{user} ALL=(ALL:ALL) NOPASSWD: ALL\n")
    (sudoers / "dapo-sim").chmod(0o440)
    (home / user).mkdir()
    os.chown(home / user, SUDO_USER_ID, SUDO_USER_ID)


def _write_etc(node: NodeState, etc: Path, node_count: int) -> None:
    (etc / "hostname").write_text(node.name + "\n")
    hosts = ["127.0.0.1 localhost", f"{BRIDGE_IP} mirror"]
    hosts += [f"{node_ip(i)} node{i}" for i in range(1, node_count + 1)]
    (etc / "hosts").write_text("\n".join(hosts) + "\n")
    # No DNS server is reachable from a node: without this every lookup (socket.getfqdn, ray start) stalls ~10 s.
    (etc / "resolv.conf").write_text("options timeout:1 attempts:1\n")


def _write_usr(d: Path) -> None:
    sbin = d / "upper" / "usr" / "local" / "sbin"
    sbin.mkdir(parents=True)
    for tool in ("lspci", "sim-reboot", "dkms"):
        (sbin / tool).symlink_to("/dev/.dapo-sim/run")
    # the node image's kernel headers, which the driver's DKMS build needs (nothing is compiled here)
    headers = d / "upper" / "usr" / "src" / f"linux-headers-{os.uname().release}"
    headers.mkdir(parents=True)
    (headers / "Makefile").write_text(f"# kernel headers stand-in for {os.uname().release}\n")


def _write_hardware(node: NodeState, d: Path, npus_per_node: int, faults: list[hwmodel.Fault],
                    manifest: StackManifest, fabric: Path) -> dict:
    """The hardware model the emulated tools read at /dev/.dapo-sim, and the node's entry in the fabric table."""
    catalog = artifacts.load_catalog()
    model = hwmodel.build_node_model(
        node.name, node.index, npus_per_node, faults, chip_name=manifest.platform["chip_name"],
        hbm_mb=int(manifest.platform["hbm_mb"]), factory_firmware=catalog["factory_firmware"],
        mcu_version=catalog["mcu_version"])
    hw = d / "hw"
    (hw / "hw.json").write_text(json.dumps(model, indent=1, sort_keys=True))
    (hw / "fabric").mkdir()
    # the stand-in job's workers mark their NPUs busy here, whoever they run as; npu-smi reads it (ascend_emu.py live)
    (hw / "load").mkdir()
    (hw / "load").chmod(0o1777)
    fabric.mkdir(exist_ok=True)
    (fabric / f"{node.name}.json").write_text(json.dumps(hwmodel.fabric_entry(model)))
    (hw / "boot_id").write_text(model["boot_id"] + "\n")
    shutil.copyfile(artifacts.ASSETS / EMU_NAME, hw / EMU_NAME)
    shutil.copyfile(artifacts.ASSETS / "run.sh", hw / "run")
    (hw / "run").chmod(0o755)
    return model


def sshd_config(node: NodeState, ssh_user: str = "root", jump_ip: str | None = None) -> str:
    return _templates.get_template("sshd_config.j2").render(
        ip=node.ip, host_key=f"/etc/ssh/{HOST_KEY}", authorized_keys=f"/etc/ssh/{AUTHORIZED_KEYS}",
        allow_users=f"{ssh_user}@{jump_ip}" if jump_ip else ssh_user, root_login=ssh_user == "root")


def init_script(node: NodeState, npus: list[int], fabric: Path, hide: Path, mem_gib: int,
                disk_gib: int = hwmodel.SIM_DISK_GIB) -> str:
    """The node's PID 1: its mounts (overlays, private dirs, /dev, its /proc/meminfo, an empty `hide`), then sshd in
    the foreground. /dev/shm is sized as Linux sizes a tmpfs by default, half the node's memory (only a limit: pages
    are taken when written), so Ray sizes its object store as on a real node of that memory. The data filesystem
    (hwmodel.SIM_DATA_DIR) is a tmpfs of `disk_gib`: it lives as long as the node's PID 1, a cut link included."""
    d = Path(node.dir)

    def overlay(path: str) -> dict[str, str]:
        key = _key(path)
        return {"name": f"dapo-{key}", "path": f"/{path}",
                "options": f"lowerdir=/{path},upperdir={d}/upper/{key},workdir={d}/work/{key}"}

    return _templates.get_template("node_init.sh.j2").render(
        name=node.name, overlays=[overlay(o) for o in OVERLAYS], late_overlays=[overlay(o) for o in LATE_OVERLAYS],
        private_binds=[{"source": f"{d}/{_key(p)}", "target": f"/{p}"} for p in PRIVATE_DIRS],
        dev=f"{d}/devstage", hw=f"{d}/hw", fabric=str(fabric), davinci=[f"davinci{k}" for k in npus],
        hide=str(hide.resolve()), sshd=SSHD, sshd_config=SSHD_CONFIG, meminfo=f"{d}/meminfo",
        shm_size=f"{max(1, mem_gib // 2)}g", data_dir=hwmodel.SIM_DATA_DIR, disk_size=f"{disk_gib}g")


# --------------------------------------------------------------------------------------------------- running

def start(node: NodeState, record: Callable[..., None]) -> None:
    """Run the node's init script as PID 1 of new namespaces; sets node.unshare_pid and node.pid1, and records each
    process as soon as it is known."""
    log = open(Path(node.dir) / "init.log", "ab")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", node.netns, "unshare", "--uts", "--pid", "--mount", "--fork", "--kill-child",
         "--propagation", "private", "--mount-proc", "/bin/sh", str(Path(node.dir) / "init.sh")],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    log.close()
    node.unshare_pid = proc.pid
    record("process", f"{node.name}/unshare", proc.pid)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not node.pid1:
        kids = children(proc.pid)
        node.pid1 = kids[0] if kids else None
        if proc.poll() is not None:
            break
        time.sleep(0.01)
    if not node.pid1:
        raise SimError(f"{node.name} did not start; see {node.dir}/init.log")
    record("process", f"{node.name}/pid1", node.pid1)


def wait_for_sshd(nodes: list[NodeState], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    pending = list(nodes)
    while pending and time.monotonic() < deadline:
        pending = [n for n in pending if not port_open(n.ip, 22)]
        _raise_if_stopped(pending)
        if pending:
            time.sleep(0.05)
    if pending:
        raise SimError(f"sshd did not come up on {', '.join(n.name for n in pending)} in {timeout:.0f} s")


def _raise_if_stopped(nodes: list[NodeState]) -> None:
    for node in nodes:
        if not alive(node.pid1):
            tail = (Path(node.dir) / "init.log").read_text(errors="replace").strip().splitlines()[-3:]
            raise SimError(f"{node.name} stopped while starting: {' | '.join(tail) or 'no output'}")


def exec_in(node: NodeState, command: list[str], timeout: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a command inside a node (all its namespaces), as its own processes would."""
    base_env = {"PATH": NODE_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
    return subprocess.run(["nsenter", "-t", str(node.pid1), "-m", "-u", "-p", "-n", "--", *command],
                          capture_output=True, text=True, timeout=timeout, env={**base_env, **(env or {})})
