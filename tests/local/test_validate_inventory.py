"""The validate_inventory role runs the inventory checks before site.yml touches any node (the checks themselves:
tests/unit/test_inventory_checks.py)."""

import os
import subprocess
import sys
from pathlib import Path

import yaml

from dapo_ops.paths import PROJECT_ROOT
from tests.unit.test_inventory_checks import GOOD, with_


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


def test_the_role_refuses_an_unknown_dapo_variable_naming_the_closest(tmp_path):
    bad = run_playbook(tmp_path, {"n1": with_(dapo_pip_index="http://mirror/simple")})
    assert bad.returncode != 0
    assert ("n1: dapo_pip_index is not a dapo-ops inventory variable (did you mean dapo_pip_index_url?)"
            in bad.stdout), bad.stdout[-2000:]
    assert "LATER-LAYER-RAN" not in bad.stdout


def test_an_inventory_without_npu_nodes_says_how_to_give_one(tmp_path):
    """The product names the way in, not the simulator (issue 28 (8))."""
    empty = run_playbook(tmp_path, {})
    assert empty.returncode != 0
    flat = " ".join(empty.stdout.split())
    assert ("the inventory has no hosts in group npu_nodes: pass -i inventory/<cluster> or set ANSIBLE_INVENTORY "
            "(inventory/example shows one; docs/real-cluster.md, step 3)") in flat, empty.stdout[-2000:]
    assert "dapo-sim" not in empty.stdout and "LATER-LAYER-RAN" not in empty.stdout
