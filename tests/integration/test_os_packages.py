"""The os_packages role on the simulated fleet (issue 28 (2)): the stack manifest's OS packages a node lacks, installed
before the HDK layer from a directory the controller pushes (a flat apt repository of .deb files the controller's
apt fetched, as docs/os-packages.md tells a site to build one: dapo_sim/os_repo.py) or from the node's own
repositories, while the repositories of the node's image are unreachable. Each node starts as the controller's
image (its /usr and package database, overlaid), so what it lacks is what this machine lacks, and what it installs
stays in the node."""

import shutil
import subprocess
from pathlib import Path

import pytest

from dapo_ops.manifest import load_manifest
from dapo_sim import os_repo
from dapo_sim.fleet import FleetSpec

from .ansible_helpers import playbook
from .helpers import hosts, sh

INSTALLED = "dpkg-query -W -f '${Package} ${db:Status-Status}\\n' "


@pytest.fixture(scope="module")
def fleet(sim):
    sim.down()
    sim.up(FleetSpec(nodes=2))
    return hosts()


@pytest.fixture(scope="module")
def wanted():
    """The manifest's deb packages this machine (so a fresh node) lacks; the tests need one at least."""
    names = os_repo.missing_on_nodes(load_manifest())
    assert "dkms" in names, f"the controller has dkms installed, so a node would too; missing here: {names}"
    return names


def inventory(tmp_path: Path, nodes: dict[str, dict]) -> Path:
    """An inventory over the simulated one: node -> its os_packages variables."""
    extra = tmp_path / "os-packages.yml"
    extra.write_text("all:\n  hosts:\n" + "".join(
        f"    {node}:\n" + "".join(f"      {k}: {v}\n" for k, v in variables.items())
        for node, variables in nodes.items()))
    return extra


def local(directory) -> dict:
    return {"dapo_os_packages_source": "local", "dapo_os_packages_dir": directory}


def installed(host, names) -> set[str]:
    out = sh(host, INSTALLED + " ".join(names) + " 2>/dev/null; true").stdout
    return {line.split()[0] for line in out.splitlines() if line.endswith(" installed")}


def test_a_fresh_node_lacks_the_packages_and_reaches_no_package_repository(fleet, wanted):
    node = fleet["node1"]
    assert installed(node, wanted) == set()
    sources = sh(node, "cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null; true").stdout
    assert "deb.debian.org" in sources or "http" in sources, sources    # the image's repositories, named ...
    reach = sh(node, "python3 -c \"import socket; socket.create_connection(('deb.debian.org', 80), timeout=3)\"",
               ok=False)
    assert reach.exit_code != 0                                          # ... and out of reach


def test_check_mode_says_what_it_would_install_and_installs_nothing(fleet, sim, wanted, tmp_path):
    repository = sim.mirror_root / "os-packages"
    rc, output, recap = playbook("--tags", "os_packages", "--check",
                                 extra_inventory=inventory(tmp_path, {n: local(repository) for n in fleet}))
    assert rc == 0, output[-3000:]
    flat = " ".join(output.split())
    for name in fleet:
        assert f"{name}: would install {', '.join(wanted)} from {repository}" in flat
        assert recap[name]["changed"] >= 1
        assert installed(fleet[name], wanted) == set()


def test_a_directory_without_an_index_stops_the_node_before_anything_is_copied(fleet, sim, wanted, tmp_path):
    debs = tmp_path / "debs"
    debs.mkdir()
    for deb in (sim.mirror_root / "os-packages").glob("*.deb"):
        (debs / deb.name).write_bytes(deb.read_bytes())
    rc, output, recap = playbook("--tags", "os_packages", "--limit", "node1",
                                 extra_inventory=inventory(tmp_path, {"node1": local(debs)}))
    flat = " ".join(output.split())
    assert rc != 0 and recap["node1"]["failed"] == 1, output[-3000:]
    assert (f"dapo_os_packages_dir {debs} is not a deb repository directory: it needs {debs}/Packages or "
            f"{debs}/Packages.gz (dpkg-scanpackages . > Packages writes it; docs/os-packages.md)") in flat
    assert sh(fleet["node1"], "test -e /var/lib/dapo-ops/os-packages", ok=False).exit_code != 0
    assert installed(fleet["node1"], wanted) == set()


def without_a_dependency(repository: Path, target: Path) -> str:
    """A copy of the repository without one of the packages the wanted ones depend on; its name."""
    shutil.copytree(repository, target)
    dropped = sorted(target.glob("kmod_*.deb")) or sorted(target.glob("libpci3_*.deb"))
    assert dropped, "the repository holds neither kmod nor libpci3 to leave out"
    dropped[0].unlink()
    index = subprocess.run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=target,
                           capture_output=True, text=True, check=True).stdout
    (target / "Packages").write_text(index)
    return dropped[0].name.split("_")[0]


def test_a_pushed_directory_installs_what_the_node_lacks_in_the_node_only_and_one_without_a_dependency_fails(
        fleet, sim, wanted, tmp_path):
    """node1 from the mirror's repository, node2 from a copy without one dependency, in one run."""
    node1, node2 = fleet["node1"], fleet["node2"]
    # the node's apt sources, lists and caches (apt reads the pushed directory with state of its own)
    sources = ("md5sum /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null; "
               "ls -l --time-style=full-iso /var/lib/apt/lists /var/cache/apt 2>&1; true")
    before = sh(node1, sources).stdout
    dependency = without_a_dependency(sim.mirror_root / "os-packages", tmp_path / "incomplete")
    rc, output, recap = playbook("--tags", "os_packages", extra_inventory=inventory(
        tmp_path, {"node1": local(sim.mirror_root / "os-packages"), "node2": local(tmp_path / "incomplete")}))
    flat = " ".join(output.split())
    assert rc != 0 and recap["node1"]["failed"] == 0 and recap["node1"]["changed"] >= 1, output[-3000:]
    assert installed(node1, wanted) == set(wanted)
    assert sh(node1, sources).stdout == before
    on_controller = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Status}", "dkms"], capture_output=True,
                                   text=True)
    assert on_controller.stdout != "installed" and not Path("/usr/sbin/dkms").exists()   # the node's /usr only
    assert recap["node2"]["failed"] == 1 and f"Depends: {dependency} but it is not installable" in flat
    assert installed(node2, wanted) == set()


def test_a_rerun_installs_nothing_and_the_node_s_own_repositories_serve_the_source_site(fleet, sim, wanted, tmp_path):
    """node1 again from the same directory; node2 as a site whose nodes have their own apt mirror: its sources name
    only the simulated mirror's repository, over HTTP."""
    node2 = fleet["node2"]
    sh(node2, "rm -f /etc/apt/sources.list.d/* && "
              f"echo 'deb [trusted=yes] {sim.mirror_url}/os-packages ./' > /etc/apt/sources.list")
    # apt's lists as fetched a minute ago, before the site's repository was set up: younger than the role's
    # cache_valid_time, yet without the packages (CI failed so on a machine whose own apt-get update was recent)
    sh(node2, "mkdir -p /var/lib/apt/periodic && touch -d '-1 minute' /var/lib/apt/periodic/update-success-stamp")
    rc, output, recap = playbook("--tags", "os_packages", extra_inventory=inventory(
        tmp_path, {"node1": local(sim.mirror_root / "os-packages"), "node2": {"dapo_os_packages_source": "site"}}))
    assert rc == 0 and recap["node1"]["changed"] == 0 and recap["node2"]["changed"] >= 1, output[-3000:]
    assert "node2: installing " + ", ".join(wanted) + " from the repositories the node is set up with" in " ".join(
        output.split())
    assert installed(node2, wanted) == set(wanted)
