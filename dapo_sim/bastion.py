"""The jump host of a fleet brought up with `dapo-sim up --bastion`: a network namespace on the management bridge
with an OpenSSH sshd of its own, which lets the controller's key in as root and forwards TCP to the nodes (whose
sshd lets SSH in only from it). It runs in its own PID namespace, so that killing it ends every session with it.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from dapo_sim.errors import SimError
from dapo_sim.netns import BRIDGE, SUBNET, create
from dapo_sim.proc import port_open, run

NAME = "dapo-bastion"          # its namespace, and its Host alias in the simulator's ssh config
IP = f"{SUBNET}.250"           # above every node's address (MAX_NODES)
VETH_HOST, VETH_INSIDE = "dapobsth", "dapobstn"
USER = "root"
HOST_KEY = "ssh_host_ed25519_key"

SSHD_CONFIG = """# The simulated fleet's jump host: the controller's key in as root, TCP forwarded to the nodes.
ListenAddress {ip}
Port 22
HostKey {host_key}
PidFile none
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile {authorized_keys}
StrictModes no
UsePAM no
UseDNS no
AllowTcpForwarding yes
MaxSessions 100
MaxStartups 200:30:400
"""


def public_key(directory: Path) -> Path:
    return directory / f"{HOST_KEY}.pub"


def start(directory: Path, client_public_key: Path, record, log: Path) -> None:
    """Write the jump host's files under `directory`, make its namespace and start its sshd; each thing made is
    recorded in the fleet's ledger."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True, mode=0o700)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{NAME}", "-f", str(directory / HOST_KEY)],
        "create the jump host's host key")
    shutil.copyfile(client_public_key, directory / "authorized_keys")
    config = directory / "sshd_config"
    config.write_text(SSHD_CONFIG.format(ip=IP, host_key=directory / HOST_KEY,
                                         authorized_keys=directory / "authorized_keys"))
    create(["ip", "netns", "add", NAME], "netns", NAME, record)
    create(["ip", "link", "add", VETH_HOST, "type", "veth", "peer", "name", VETH_INSIDE], "link", VETH_HOST, record,
            peer=VETH_INSIDE)
    run(["ip", "link", "set", VETH_HOST, "master", BRIDGE, "up"], "attach the jump host to the bridge")
    run(["ip", "link", "set", VETH_INSIDE, "netns", NAME], "move the jump host's veth")
    for args in (["link", "set", "lo", "up"], ["addr", "add", f"{IP}/24", "dev", VETH_INSIDE],
                 ["link", "set", VETH_INSIDE, "up"]):
        run(["ip", "-n", NAME, *args], "configure the jump host's network")
    with open(log, "ab") as out:
        proc = subprocess.Popen(["ip", "netns", "exec", NAME, "unshare", "--pid", "--fork", "--kill-child",
                                 "/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    record("process", "bastion/sshd", proc.pid)
    deadline = time.monotonic() + 20
    while not port_open(IP, 22):
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise SimError(f"the jump host's sshd did not come up: {' | '.join(tail) or 'no output'}")
        time.sleep(0.05)
