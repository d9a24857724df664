"""How the controller reaches the simulated nodes: its SSH key, known_hosts, ssh config and the Ansible inventory."""

from __future__ import annotations

from pathlib import Path

import yaml

from dapo_ops.manifest import StackManifest
from dapo_ops.stack.artifacts import DIGEST_FILE_NAME, digest_lines
from dapo_sim import artifacts, bastion, mirror, node, repos
from dapo_sim.wheels import STANDIN_PACKAGES
from dapo_sim.netns import BRIDGE_IP, DATA_NIC
from dapo_sim.proc import run
from dapo_sim.state import NodeState

INVENTORY_HEADER = ("# Written by `dapo-sim up` for the simulated fleet; rewritten on every `sim up`.\n"
                    "# Do not edit: change the simulator's options instead.\n")


def ensure_client_key(key_file: Path) -> None:
    if not key_file.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dapo-ops-sim", "-f", str(key_file)],
            "create the controller SSH key")
    key_file.chmod(0o600)


def write_known_hosts(nodes: list[NodeState], known_hosts: Path, bastion_dir: Path | None = None) -> None:
    """Pre-seeded from the host keys the nodes (and the jump host) were given, so that clients can check host keys
    strictly."""
    lines = []
    for n in nodes:
        pub = node.host_public_key(n).read_text().split()
        lines.append(f"{n.ip} {pub[0]} {pub[1]}")
    if bastion_dir is not None:
        pub = bastion.public_key(bastion_dir).read_text().split()
        lines.append(f"{bastion.IP} {pub[0]} {pub[1]}")
    known_hosts.write_text("\n".join(lines) + "\n")


def write_ssh_config(nodes: list[NodeState], ssh_config: Path, key_file: Path, known_hosts: Path,
                     user: str = "root", jump: bool = False) -> None:
    """An ssh config for the operator (`ssh -F FILE node1`) and, with a jump host, the one the inventory passes to
    OpenSSH and dapo-ops with -F: OpenSSH's ProxyJump connects to the jump host with the config file's settings
    only (not the command line's -o options), so its host key file and key are written here."""
    common = [f"  IdentityFile {key_file}", "  IdentitiesOnly yes", f"  UserKnownHostsFile {known_hosts}",
              "  StrictHostKeyChecking yes", "  ConnectTimeout 5"]
    config = []
    if jump:
        config += [f"Host {bastion.NAME} {bastion.IP}", f"  HostName {bastion.IP}", f"  User {bastion.USER}",
                   *common, ""]
    for n in nodes:
        config += [f"Host {n.name} {n.ip}", f"  HostName {n.ip}", f"  User {user}", *common,
                   *([f"  ProxyJump {bastion.NAME}"] if jump else []), ""]
    ssh_config.write_text("\n".join(config))


def write_digest_file(directory: Path, manifest: StackManifest) -> Path:
    """The stand-in installers' sha256 in the file `dapo-ops stack artifacts DIR` writes beside a site's vendor
    files (not in inventory/sim: Ansible would read any file there as an inventory source)."""
    path = directory / DIGEST_FILE_NAME
    by_file = {manifest.artifact(key).file: sha for key, sha in artifacts.pinned_digests(manifest).items()}
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(digest_lines(by_file))
    return path


def connection_vars(user: str, key_file: Path, known_hosts: Path, ssh_config: Path | None) -> dict:
    """How Ansible and dapo-ops reach the nodes (the npu_nodes group's: a delegated task on the controller keeps
    its own connection and become)."""
    args = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
    if ssh_config is not None:
        args = f"-F {ssh_config} {args} -o ProxyJump={bastion.NAME}"
    found = {"ansible_user": user, "ansible_ssh_private_key_file": str(key_file), "ansible_ssh_common_args": args}
    if user != "root":
        found["ansible_become"] = True
    return found


def write_inventory(target: Path, nodes: list[NodeState], npus_per_node: int, *, key_file: Path,
                    known_hosts: Path, mirror_url: str, mirror_root: Path, manifest: StackManifest,
                    ssh_user: str = "root", ssh_config: Path | None = None) -> None:
    """inventory/sim/hosts.yml: the nodes plus the connection and artifact-source variables; ssh_config when the
    nodes are reached through the jump host it names."""
    layout = mirror.MirrorLayout(mirror_root)
    inventory = {
        "all": {
            "children": {
                "npu_nodes": {
                    "hosts": {n.name: {"ansible_host": n.ip, "dapo_hccl_ifname": DATA_NIC} for n in nodes},
                    "vars": connection_vars(ssh_user, key_file, known_hosts, ssh_config),
                },
            },
            "vars": {
                # what the import sweep must not import here: the NPU-bound wheels and the vLLM, vllm-ascend and
                # verl checkouts the mirror serves are stand-ins (a failure they cause counts as skipped)
                "dapo_import_standins": [*STANDIN_PACKAGES, *repos.STANDIN_SOURCES],
                "ansible_python_interpreter": node.NODE_PYTHON,
                "dapo_npus_per_node": npus_per_node,
                # the nodes start as this machine's image and reach no package repository: preflight checks the
                # packages are there (the tests that install OS packages give a directory of them)
                "dapo_os_packages_source": "none",
                "dapo_artifact_url": f"{mirror_url}/artifacts",
                # the stand-in installers' digests, as a site records its vendor files' (the manifest has the real
                # files', where they are known)
                "dapo_artifact_digest_file": str(write_digest_file(layout.artifacts, manifest)),
                "dapo_pip_index_url": f"{mirror_url}/simple",
                "dapo_pip_trusted_host": BRIDGE_IP,
                "dapo_git_base_url": f"{mirror_url}/git",
                # the nodes' lock, with the stand-in wheels' hashes for the NPU-bound packages
                "dapo_stack_lock": str(layout.lock),
                # byte-compiling the ~200 locked packages costs a 2-core host ~25 s per node
                "dapo_pip_compile": False,
                # the commits the mirror's stand-in repositories carry at the pinned tags
                "dapo_source_commits": repos.tag_commits(layout.git, manifest),
                "dapo_reboot_command": node.REBOOT_COMMAND,
                "dapo_boot_time_command": node.BOOT_TIME_COMMAND,
            },
        }
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(INVENTORY_HEADER + yaml.safe_dump(inventory, sort_keys=False))
    tmp.replace(target)
