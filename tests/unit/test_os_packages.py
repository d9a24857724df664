"""The OS packages the layers need (the manifest's os_packages, dapo_ops.model.os_packages) and which of them a node
lacks: parsed from dpkg-query's and rpm's own output formats, as the os_packages role reads them."""

import pytest

from dapo_ops.errors import ManifestError, ParseError
from dapo_ops.manifest import load_manifest
from dapo_ops.model import os_packages
from filter_plugins.dapo_os_packages import plan as plan_filter

PACKAGES = load_manifest().os_packages
ENTRY = {"layer": "build", "deb": "git", "rpm": "git", "command": "git"}
# dpkg-query -W -f '${Package}\t${db:Status-Status}\n' on a Debian 12 node: removed packages keep a line
DPKG = ("gcc\tinstalled\ng++\tinstalled\nmake\tinstalled\ncmake\tinstalled\ngit\tinstalled\nlibnuma-dev\tinstalled\n"
        "libpci3:amd64\tinstalled\nnet-tools\tinstalled\niproute2\tinstalled\nnftables\tinstalled\n"
        "pciutils\tconfig-files\nlinux-headers-6.1.0-28-arm64\tnot-installed\n")


def test_the_shipped_manifest_names_every_layer_in_both_package_formats():
    assert {p.layer for p in PACKAGES} == set(os_packages.LAYERS)
    assert all(set(p.names) == {"deb", "rpm"} for p in PACKAGES)
    assert os_packages.commands(PACKAGES, ["hdk", "launch"]) == {
        "lspci": {"deb": "pciutils", "rpm": "pciutils"}, "ifconfig": {"deb": "net-tools", "rpm": "net-tools"},
        "dkms": {"deb": "dkms", "rpm": "dkms"}, "gcc": {"deb": "gcc", "rpm": "gcc"},
        "ss": {"deb": "iproute2", "rpm": "iproute"}, "nft": {"deb": "nftables", "rpm": "nftables"}}
    assert "/usr/src/kernels/{kernel}" in os_packages.kernel_header_paths(PACKAGES)


@pytest.mark.parametrize("entry, needle", [
    ({**ENTRY, "layer": "cann"}, "os_packages.git.layer is 'cann', not one of hdk, build, launch"),
    ({**ENTRY, "rpm": None}, "os_packages.git.rpm is None, not a package name"),
    ({**ENTRY, "deb": "git; reboot"}, "os_packages.git.deb is 'git; reboot', not a package name"),
    ({**ENTRY, "paths": ["/usr/bin/git"]}, "needs exactly one of command and paths"),
    ({k: v for k, v in ENTRY.items() if k != "command"}, "needs exactly one of command and paths"),
    ({**{k: v for k, v in ENTRY.items() if k != "command"}, "paths": ["usr/bin/git"]}, "must be a list of absolute"),
    ("git", "os_packages.git must be a mapping"),
])
def test_a_malformed_entry_is_named(entry, needle):
    with pytest.raises(ManifestError) as raised:
        os_packages.parse_os_packages({"git": entry}, "m.yml")
    assert needle in str(raised.value) and str(raised.value).startswith("m.yml: ")


def test_installed_reads_only_installed_lines_and_drops_the_architecture():
    names = os_packages.installed(DPKG, "deb")
    assert "libpci3" in names and "pciutils" not in names and "linux-headers-6.1.0-28-arm64" not in names
    assert os_packages.installed("gcc\ngcc-c++\n\n", "rpm") == {"gcc", "gcc-c++"}
    with pytest.raises(ParseError, match="dpkg-query. output at line 2: not 'package<TAB>status'"):
        os_packages.installed("gcc\tinstalled\ngcc installed\n", "deb")


def test_the_plan_installs_what_the_database_lacks_and_the_headers_only_without_a_header_directory():
    names = os_packages.installed(DPKG, "deb")
    assert os_packages.plan(PACKAGES, package_format="deb", kernel="6.1.0-28-arm64", installed_names=names,
                            kernel_headers_found=True) == ["pciutils", "dkms"]
    assert os_packages.plan(PACKAGES, package_format="deb", kernel="6.1.0-28-arm64", installed_names=names,
                            kernel_headers_found=False) == ["pciutils", "dkms", "linux-headers-6.1.0-28-arm64"]
    assert os_packages.plan(PACKAGES, package_format="rpm", kernel="5.10.0-182.0.0.95.oe2203sp3.aarch64",
                            installed_names={"gcc", "make"}, kernel_headers_found=False, layers=["hdk"]) == [
        "pciutils", "net-tools", "dkms", "kernel-devel-5.10.0-182.0.0.95.oe2203sp3.aarch64"]
    everything = {p.name("deb", "k") for p in PACKAGES}
    assert os_packages.plan(PACKAGES, package_format="deb", kernel="k", installed_names=everything,
                            kernel_headers_found=True) == []


@pytest.mark.parametrize("os_like, expected", [(["ubuntu", "debian"], "deb"), (["debian"], "deb"),
                                               (["openEuler"], "rpm"), (["kylin"], "rpm"),
                                               (["euleros", "rhel", "fedora"], "rpm")])
def test_the_package_format_follows_os_release(os_like, expected):
    assert os_packages.package_format(os_like) == expected


def facts(output, rc=0, os_like=("debian",), headers="/usr/src/linux-headers-6.1.0-28-arm64"):
    return {"platform": {"os_like": list(os_like), "kernel": "6.1.0-28-arm64"}, "kernel_headers": headers,
            "outputs": {"deb": {"rc": rc, "stdout": output, "stderr": "dpkg-query: error: cannot access"},
                        "rpm": {"rc": 127, "stdout": "", "stderr": "rpm: command not found"}}}


def test_the_role_s_filter_plans_from_dapo_node_facts_and_names_an_unreadable_database():
    from ansible.errors import AnsibleFilterError

    assert plan_filter(facts(DPKG), {"pciutils": {"layer": "hdk", "deb": "pciutils", "rpm": "pciutils",
                                                  "command": "lspci"}}) == {
        "format": "deb", "kernel": "6.1.0-28-arm64", "missing": ["pciutils"]}
    with pytest.raises(AnsibleFilterError, match="cannot read the deb package database: dpkg-query: error"):
        plan_filter(facts("", rc=2), {})
    with pytest.raises(AnsibleFilterError, match="cannot read the rpm package database: rpm: command not found"):
        plan_filter(facts(DPKG, os_like=("openEuler",)), {})
