"""The inventory checks that run before any node is touched (dapo_ops.inventory_checks; the validate_inventory role
applies them through the dapo_inventory_problems filter, tests/local/test_validate_inventory.py)."""

import tempfile
from pathlib import Path

import pytest

from dapo_ops.inventory_checks import fleet_problems, host_problems
from dapo_ops.manifest import load_manifest
from dapo_ops.stack.artifacts import digest_lines

MANIFEST = load_manifest()
DIGESTS = {key: f"{n:064x}" for n, key in enumerate(MANIFEST.artifacts, 1)}


def digest_file(digests: dict[str, str], directory: Path | None = None) -> str:
    """A site's digest file (as `dapo-ops stack artifacts DIR` writes it) recording `digests` (key -> sha256)."""
    path = Path(directory or tempfile.mkdtemp(prefix="dapo-digests-")) / "dapo-artifacts.sha256"
    path.write_text(digest_lines({MANIFEST.artifact(key).file: sha for key, sha in digests.items()}))
    return str(path)


GOOD = {"ansible_host": "192.0.2.11", "dapo_npus_per_node": 8, "dapo_artifact_url": "http://mirror/ascend",
        "dapo_hccl_ifname": "enp189s0f0", "dapo_artifact_digest_file": digest_file(DIGESTS)}


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
    (with_(dapo_artifact_digest_file=None), "no sha256 for Ascend-hdk-910b-npu-driver_"),
    (with_(dapo_artifact_digest_file=digest_file({k: v for k, v in DIGESTS.items() if k != "firmware"})),
     "no sha256 for Ascend-hdk-910b-npu-firmware_7.7.0.1.231.run: the stack manifest has none and "
     "dapo_artifact_digest_file /tmp/"),
    (with_(dapo_artifact_digest_file="relative/digests"),
     "dapo_artifact_digest_file must be an absolute path on the controller, got 'relative/digests'"),
    (with_(dapo_artifact_digest_file="/nonexistent/digests"),
     "dapo_artifact_digest_file: artifact digest file /nonexistent/digests: No such file or directory"),
    (with_(dapo_artifact_digests=DIGESTS), "dapo_artifact_digests is replaced by dapo_artifact_digest_file"),
    (with_(dapo_hdk_downgrade="firmware"), "dapo_hdk_downgrade must be a list of driver, firmware (got 'firmware')"),
    (with_(dapo_hdk_downgrade=["cann"]), "dapo_hdk_downgrade must be a list of driver, firmware (got ['cann'])"),
    (with_(dapo_provision_during_run=True), "dapo_provision_during_run must be a run id or `any` (got True)"),
    (with_(dapo_ray_ports={"gcs": "6379-6380"}), "dapo_ray_ports.gcs: '6379-6380' must be one port, not a range"),
    (with_(dapo_ray_ports={"nonsense": 1}), "dapo_ray_ports.nonsense: not one of Ray's ports"),
    (with_(dapo_launch_timeouts={"stop": 1}), "dapo_launch_timeouts.stop: 1 is not a whole number of seconds"),
    (with_(dapo_launch_timeouts={"teardown": 60}), "dapo_launch_timeouts.teardown: not a launch step"),
    (with_(dapo_ray_firewall="sometimes"), "dapo_ray_firewall must be true or false (got 'sometimes')"),
    (with_(dapo_run_fence_nic=2), "dapo_run_fence_nic must be true or false (got 2)"),
    (with_(dapo_ray_tls="maybe"), "dapo_ray_tls must be true or false (got 'maybe')"),
    (with_(dapo_os_packages_source="apt"), "dapo_os_packages_source is 'apt', not one of site, local, none"),
    (with_(dapo_os_packages_source="local"),
     "dapo_os_packages_source local needs dapo_os_packages_dir, an absolute path on the controller (got None)"),
    (with_(dapo_os_packages_source="local", dapo_os_packages_dir="debs"),
     "needs dapo_os_packages_dir, an absolute path on the controller (got 'debs')"),
    (with_(dapo_os_packages_source="local", dapo_os_packages_dir="/nonexistent/debs"),
     "dapo_os_packages_dir /nonexistent/debs is not a directory on the controller"),
    (with_(dapo_os_packages_dir=tempfile.gettempdir()),
     "dapo_os_packages_dir is set but dapo_os_packages_source is site (set it to local)"),
    (with_(dapo_pip_index="http://mirror/simple"),
     "dapo_pip_index is not a dapo-ops inventory variable (did you mean dapo_pip_index_url?)"),
    (with_(dapo_zzz=1), "dapo_zzz is not a dapo-ops inventory variable (docs/inventory-variables.md lists them)"),
])
def test_each_problem_names_its_variable(hostvars, needle):
    problems = host_problems("n1", hostvars)
    assert any(needle in p for p in problems), problems
    assert not any(p.startswith("n1") for p in problems)  # the role prefixes the host once


def test_a_local_package_directory_that_exists_is_accepted(tmp_path):
    assert host_problems("n1", with_(dapo_os_packages_source="local", dapo_os_packages_dir=str(tmp_path))) == []
    assert host_problems("n1", with_(dapo_os_packages_source="none")) == []


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


def test_the_launch_switches_take_ansibles_booleans():
    for value in (True, False, "yes", "no", "on", "off", "true", "False", 1, 0):
        assert host_problems("n1", with_(dapo_ray_firewall=value, dapo_run_fence_nic=value, dapo_ray_tls=value)) == []


def test_the_job_commands_need_no_installer_digests():
    assert host_problems("n1", with_(dapo_artifact_digest_file=None), provisioning=False) == []


def test_a_digest_the_manifest_pins_may_not_be_overridden(monkeypatch):
    import dataclasses

    from dapo_ops import inventory_checks
    from dapo_ops.manifest import load_manifest

    real = load_manifest()
    pinned = dataclasses.replace(real, artifacts={**real.artifacts, "driver": dataclasses.replace(
        real.artifacts["driver"], sha256="f" * 64)})
    monkeypatch.setattr(inventory_checks, "load_manifest", lambda path=None: pinned)
    problems = host_problems("n1", GOOD)
    assert any(f"{MANIFEST.artifact('driver').file}: dapo_artifact_digest_file " in p and
               f"records sha256 {DIGESTS['driver']}, the stack manifest pins {'f' * 64}" in p for p in problems)
    without_driver = digest_file({k: v for k, v in DIGESTS.items() if k != "driver"})
    assert host_problems("n1", with_(dapo_artifact_digest_file=without_driver)) == []


def test_a_sites_own_manifest_with_the_vendor_digests_needs_no_digest_file(tmp_path):
    import yaml

    from dapo_ops.paths import STACK_MANIFEST

    data = yaml.safe_load(STACK_MANIFEST.read_text())
    for n, item in enumerate(data["artifacts"].values(), 1):
        item["sha256"] = f"{n:064x}"
    site = tmp_path / "manifest.yml"
    site.write_text(yaml.safe_dump(data))
    assert host_problems("n1", with_(dapo_artifact_digest_file=None, stack_manifest=str(site))) == []
    other = digest_file({"driver": "f" * 64}, tmp_path)
    assert host_problems("n1", with_(dapo_artifact_digest_file=other, stack_manifest=str(site))) != []
    same = digest_file({"driver": f"{1:064x}"}, tmp_path)
    assert host_problems("n1", with_(dapo_artifact_digest_file=same, stack_manifest=str(site))) == []


def test_the_ansible_filter_sees_every_variable_name_but_templates_only_the_checked_ones():
    """The validate_inventory role's filter: a typo'd dapo_ name is found from the names alone (a value that would
    fail to template is never read)."""
    import sys
    from collections.abc import Mapping
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "filter_plugins"))
    from dapo_inventory import inventory_problems

    class HostVars(Mapping):   # Ansible's HostVarsVars: iterating gives names, reading a value templates it
        def __init__(self, values):
            self.values, self.read = values, []

        def __getitem__(self, key):
            self.read.append(key)
            return self.values[key]

        def __iter__(self):
            return iter(self.values)

        def __len__(self):
            return len(self.values)

    n1 = HostVars(dict(GOOD, dapo_pip_index="{{ lookup('pipe', 'false') }}", other="{{ undefined }}"))
    problems = inventory_problems({"n1": n1}, ["n1"])
    assert problems == {"n1": ["dapo_pip_index is not a dapo-ops inventory variable (did you mean "
                               "dapo_pip_index_url?)"]}
    assert "dapo_pip_index" not in n1.read and "other" not in n1.read
