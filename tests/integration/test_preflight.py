"""Preflight on the simulated fleet: the build tools and libnuma the later layers need, and a host firewall that
would drop Ray's or HCCL's ports (nftables rules inside one node's network namespace)."""

import json
import subprocess

import pytest

from dapo_ops.paths import PROJECT_ROOT
from dapo_sim.fleet import FleetSpec

from .ansible_helpers import playbook
from .helpers import hosts, sh

# node2's input path: SSH and most of Ray's peer ports open, the dashboard agent's gRPC port (6382) and HCCL's not
RULES = """
table inet filter {
  chain input {
    type filter hook input priority filter; policy drop;
    ct state established,related accept
    iif lo accept
    tcp dport { 22, 6379-6381, 10002-19999 } accept
  }
}
"""


@pytest.fixture()
def provisioned(sim):
    """A provisioned 2 x 8 fleet, reused when it is up (test_launch_a2's, before this module in its CI group): a
    driver, so npu-smi answers. First in the module, before its bare fleet."""
    sim.up(FleetSpec(nodes=2, npus_per_node=8, provisioned=True))
    return hosts()


def _npu_processes(host, processes: list) -> None:
    sh(host, "python3 -c 'import json, sys; p = \"/dev/.dapo-sim/hw.json\"; d = json.load(open(p)); "
             "d[\"processes\"] = json.loads(sys.argv[1]); json.dump(d, open(p, \"w\"))' "
             f"'{json.dumps(processes)}'")


def test_a_node_a_run_is_using_is_refused_unless_the_inventory_names_the_run(provisioned, tmp_path):
    """issue 28 (7): node1 has a process on an NPU, node2 holds a run's lock; neither is provisioned until the
    inventory says so for that run."""
    import shlex

    from dapo_ops.launch.locks import LOCK_FILE

    node1, node2 = provisioned["node1"], provisioned["node2"]
    lock = {"run_id": "r-20261206-busy", "controller": "ctl", "pid": 4242, "created": "2026-12-06T04:00:00Z"}
    _npu_processes(node1, [{"npu": 3, "pid": 31337, "name": "python3", "memory_mb": 2048}])
    sh(node2, f"mkdir -p /var/lib/dapo-ops && printf '%s\\n' {shlex.quote(json.dumps(lock))} > {LOCK_FILE}")
    try:
        rc, output, recap = playbook("--tags", "preflight")
        flat = " ".join(output.split())
        assert rc != 0 and recap["node1"]["failed"] == 1 and recap["node2"]["failed"] == 1, output[-3000:]
        assert ("preflight failed on node1: 1 process(es) run on its NPUs (pid 31337 python3 on NPU 3): stop them "
                "first, or set dapo_provision_during_run: any for this node") in flat
        assert ("preflight failed on node2: it holds the run lock of run r-20261206-busy (launched from ctl, pid "
                "4242, at 2026-12-06T04:00:00Z)") in flat and "`dapo-ops stop r-20261206-busy`" in flat
        extra = tmp_path / "during.yml"
        extra.write_text("all:\n  hosts:\n    node1:\n      dapo_provision_during_run: any\n"
                         "    node2:\n      dapo_provision_during_run: r-20261206-busy\n")
        rc, output, recap = playbook("--tags", "preflight", extra_inventory=extra)
        assert rc == 0, output[-3000:]
    finally:
        _npu_processes(node1, [])
        sh(node2, f"rm -f {LOCK_FILE}")


@pytest.fixture(scope="module")
def fleet(sim):
    sim.down()
    sim.up(FleetSpec(nodes=2))
    netns = {n.name: n.netns for n in sim.load_state().nodes}
    return hosts(), netns


def report(host):
    return json.loads((PROJECT_ROOT / "runs" / "preflight" / f"{host}.json").read_text())


def test_a_default_node_has_the_build_tools_libnuma_and_no_firewall(fleet):
    rc, output, recap = playbook("--tags", "preflight")
    assert rc == 0, output[-3000:]
    for name in ("node1", "node2"):
        summary = report(name)
        assert summary["ok"] and summary["build_tools_missing"] == [] and summary["warnings"] == []
        assert summary["libnuma"]["numa_header"] == "/usr/include/numa.h" and summary["libnuma"]["numa_library"]


def test_missing_build_tools_libnuma_and_a_blocking_firewall_in_one_message(fleet, tmp_path):
    nodes, netns = fleet
    node2 = nodes["node2"]
    rules = tmp_path / "rules.nft"
    rules.write_text(RULES)
    # g++ made non-executable and /usr/include hidden, in node2's own mount namespace only
    sh(node2, "touch /root/not-a-tool && mount --bind /root/not-a-tool /usr/bin/g++ && "
              "mount -t tmpfs -o size=1m hide /usr/include")
    subprocess.run(["ip", "netns", "exec", netns["node2"], "nft", "-f", str(rules)], check=True)
    try:
        rc, output, recap = playbook("--tags", "preflight")
        flat = " ".join(output.split())
        assert rc != 0 and recap["node2"]["failed"] == 1 and recap["node1"]["failed"] == 0, output[-3000:]
        line = flat[flat.index("preflight failed on node2:"):].split("TASK [")[0].split("PLAY RECAP")[0]
        assert "missing build tools (vLLM, vllm-ascend and verl are built on the node): g++ (install g++);" in line
        assert "libnuma development files missing (numa.h;" in line and "install libnuma-dev" in line
        assert ("firewall: nftables inet filter (chain input, policy drop) drops incoming TCP to "
                "Ray dashboard_agent_grpc 6382; HCCL if_base 60000-60031") in line
        assert report("node2")["problems"] and report("node1")["ok"]

        # the same firewall as a warning, and the missing packages to be installed by the os_packages role that
        # follows (dapo_os_packages_source site): the host passes and the messages are still shown
        extra = tmp_path / "warn.yml"
        extra.write_text("all:\n  hosts:\n    node2:\n      preflight_firewall_blocking: warning\n"
                         "      dapo_hccl_ports: {if_base: 60000-60031, host_socket: 61000-61050}\n"
                         "      dapo_os_packages_source: site\n")
        rc, output, recap = playbook("--tags", "preflight", extra_inventory=extra)
        flat = " ".join(output.split())
        assert rc == 0, output[-3000:]
        assert "preflight warning on node2: firewall: nftables inet filter" in flat
        assert "HCCL if_base 60000-60031; HCCL host_socket 61000-61050" in flat
        assert ("the os_packages role installs what is missing: missing build tools (vLLM, vllm-ascend and verl are "
                "built on the node): g++ (install g++)") in flat
        assert report("node2")["ok"] and report("node2")["warnings"]
        sh(node2, "umount /usr/include && umount /usr/bin/g++")

        # a bad port map is refused before anything is read
        extra.write_text("all:\n  vars:\n    dapo_ray_ports: {gcs: 6379, workers: 19999-10002}\n")
        rc, output, recap = playbook("--tags", "preflight", extra_inventory=extra)
        flat = " ".join(output.split())
        assert rc != 0 and "dapo_ray_ports.workers: '19999-10002' is not within 1-65535 with FIRST <= LAST" in flat
    finally:
        subprocess.run(["ip", "netns", "exec", netns["node2"], "nft", "flush", "ruleset"], check=True)
        sh(node2, "umount /usr/include 2>/dev/null; umount /usr/bin/g++ 2>/dev/null; rm -f /root/not-a-tool", ok=False)
    rc, output, _ = playbook("--tags", "preflight")
    assert rc == 0, output[-3000:]


def test_a_python_too_old_for_ansibles_modules_stops_the_node_first_naming_os_python_and_fix(fleet, tmp_path):
    """issue 28 (4): read with raw before any module runs (a module would die with ansible-core's own message)."""
    nodes, _ = fleet
    sh(nodes["node2"], "printf '#!/bin/sh\\necho 3.7.9\\n' > /usr/local/bin/python-old && "
                       "chmod +x /usr/local/bin/python-old")
    extra = tmp_path / "old-python.yml"
    extra.write_text("all:\n  hosts:\n    node2:\n      ansible_python_interpreter: /usr/local/bin/python-old\n"
                     "    node1:\n      ansible_python_interpreter: /nowhere/python3\n")
    try:
        rc, output, recap = playbook("--tags", "preflight", extra_inventory=extra)
        flat = " ".join(output.split())
        assert rc != 0 and recap["node1"]["failed"] == 1 and recap["node2"]["failed"] == 1, output[-3000:]
        assert "node2 (" in flat and ("): Python 3.7.9 at /usr/local/bin/python-old, and ansible-core" in flat)
        assert "runs its modules with Python 3.8 or newer: install one from the OS's repositories" in flat
        assert "): no Python at /nowhere/python3, and ansible-core" in flat
        later = output.split("TASK [preflight : Read NPUs")[1:]   # the first module of the role: not run on either
        assert all("node1" not in part.split("TASK [")[0] and "node2" not in part.split("TASK [")[0] for part in later)
    finally:
        sh(nodes["node2"], "rm -f /usr/local/bin/python-old")
