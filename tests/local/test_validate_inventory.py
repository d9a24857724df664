"""The inventory checks site.yml runs before touching any node (dapo_ops.inventory_checks, the validate_inventory
role through the dapo_inventory_problems filter)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dapo_ops.inventory_checks import fleet_problems, host_problems
from dapo_ops.paths import PROJECT_ROOT

GOOD = {"ansible_host": "192.0.2.11", "dapo_npus_per_node": 8, "dapo_artifact_url": "http://mirror/ascend",
        "dapo_hccl_ifname": "enp189s0f0"}


def with_(**changes):
    merged = dict(GOOD, **changes)
    return {k: v for k, v in merged.items() if v is not None}


def test_a_good_host_has_no_problem():
    assert host_problems("n1", GOOD) == []


@pytest.mark.parametrize("hostvars, needle", [
    (with_(dapo_npus_per_node=None, npus_per_node=8), "npus_per_node is now called dapo_npus_per_node"),
    (with_(reboot_batch_size=2), "reboot_batch_size is now called dapo_reboot_batch_size"),
    (with_(dapo_npus_per_node=None), "no dapo_npus_per_node in the inventory"),
    (with_(dapo_npus_per_node="eight"), "dapo_npus_per_node is 'eight', not a whole number"),
    (with_(dapo_artifact_url=None), "set exactly one of dapo_artifact_url or dapo_artifact_dir"),
    (with_(dapo_artifact_dir="/srv/ascend"), "both are set"),
    (with_(dapo_hccl_ifname=None), "no dapo_hccl_ifname in the inventory"),
    (with_(dapo_hccl_ifname="eth0; reboot"), "dapo_hccl_ifname 'eth0; reboot' is not an interface name"),
    (with_(dapo_hccl_ip="10.0.0.300"), "dapo_hccl_ip '10.0.0.300' is not an IPv4 address"),
    (with_(dapo_rehearsal_backend="nccl"), "dapo_rehearsal_backend: 'nccl' is not one of hccl, gloo, tcp"),
    (with_(dapo_reboot_batch_size=0), "dapo_reboot_batch_size is 0, not a positive whole number"),
    (with_(dapo_import_standins="torch"), "dapo_import_standins must be a list of distribution names"),
])
def test_each_problem_names_its_variable(hostvars, needle):
    problems = host_problems("n1", hostvars)
    assert any(needle in p for p in problems), problems
    assert not any(p.startswith("n1") for p in problems)  # the role prefixes the host once


def test_the_npu_network_plan_is_checked_across_the_hosts_that_configure_it():
    ips = [f"10.20.0.{i}" for i in range(1, 9)]
    hosts = {"n1": with_(hccl_network_enabled=True, dapo_device_ips=ips),
             "n2": with_(hccl_network_enabled=True, dapo_device_ips=ips),  # the same addresses again
             "n3": with_(dapo_device_ips=["nonsense"])}                    # not configured here: not checked
    problems = fleet_problems(hosts, ["n1", "n2", "n3"])
    assert set(problems) <= {"n1", "n2"} and problems
    assert all(p.startswith("RoCE plan: ") for found in problems.values() for p in found)
    short = {"n1": with_(hccl_network_enabled=True, dapo_device_ips=ips[:4])}
    assert "RoCE plan" in fleet_problems(short, ["n1"])["n1"][0]


def run_playbook(tmp_path: Path, hosts: dict) -> subprocess.CompletedProcess:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"npu_nodes": {"hosts": hosts}}}}))
    playbook = tmp_path / "site.yml"  # validate_inventory first, as in site.yml, then a play that would touch nodes
    playbook.write_text(yaml.safe_dump([
        {"name": "inventory", "ansible.builtin.import_playbook": str(PROJECT_ROOT / "playbooks" / "validate_inventory.yml")},
        {"name": "touch", "hosts": "npu_nodes", "gather_facts": False,
         "tasks": [{"name": "a later layer", "ansible.builtin.debug": {"msg": "LATER-LAYER-RAN"}}]}]))
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT_ROOT / "ansible.cfg"), PATH=f"{bin_dir}:{os.environ['PATH']}",
               PYTHONPATH=str(PROJECT_ROOT), ANSIBLE_NOCOLOR="1")
    return subprocess.run([str(bin_dir / "ansible-playbook"), "-i", str(inventory), str(playbook)],
                          capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=120)


def test_the_role_stops_every_host_before_any_is_touched_naming_host_and_variable(tmp_path):
    bad = run_playbook(tmp_path, {"n1": GOOD, "n2": with_(npus_per_node=8, dapo_npus_per_node=None)})
    assert bad.returncode != 0
    assert "n2: npus_per_node is now called dapo_npus_per_node" in bad.stdout
    assert "LATER-LAYER-RAN" not in bad.stdout  # any_errors_fatal: n1, fine, is not touched either
    good = run_playbook(tmp_path, {"n1": GOOD, "n2": with_(ansible_host="192.0.2.12")})
    assert good.returncode == 0, good.stdout[-2000:]
    assert good.stdout.count("LATER-LAYER-RAN") == 2
