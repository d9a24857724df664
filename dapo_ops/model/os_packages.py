"""The OS packages the layers need (the manifest's `os_packages`), and which of them a node lacks (pure).

The os_packages role reads a node's package database (dpkg-query or rpm) and its kernel header directories with
the dapo_node_facts module and asks `plan` what to install; preflight asks `commands` which tools to look for and
names the packages from here. docs/os-packages.md says how a site builds the directory of packages for offline nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dapo_ops.errors import ManifestError, ParseError

FORMATS = ("deb", "rpm")             # dpkg-based (Ubuntu, Debian) and rpm-based (openEuler, Kylin, EulerOS, EL)
LAYERS = ("hdk", "build", "launch")
SOURCES = ("site", "local", "none")  # where they come from: the node's repositories, a pushed directory, nothing
DEB_LIKE = {"debian", "ubuntu"}
# `dpkg-query -W -f '${Package}\t${db:Status-Status}\n'`: one line per package dpkg knows, installed or not
DPKG_QUERY = ["dpkg-query", "-W", "-f", "${Package}\t${db:Status-Status}\n"]
RPM_QUERY = ["rpm", "-qa", "--queryformat", "%{NAME}\n"]
_PACKAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_{}-]*$")


@dataclass(frozen=True)
class OsPackage:
    key: str
    layer: str
    names: dict[str, str]           # package format -> package name ({kernel}: the running kernel)
    command: str | None = None      # on PATH when the package is there
    paths: tuple[str, ...] = ()     # or: one of these exists ({kernel} as above)

    def name(self, package_format: str, kernel: str) -> str:
        return self.names[package_format].replace("{kernel}", kernel)


def _entry(key: str, item, source: str) -> OsPackage:
    where = f"{source}: os_packages.{key}"
    if not isinstance(item, dict):
        raise ManifestError(f"{where} must be a mapping")
    layer = item.get("layer")
    if layer not in LAYERS:
        raise ManifestError(f"{where}.layer is {layer!r}, not one of {', '.join(LAYERS)}")
    names = {}
    for package_format in FORMATS:
        name = item.get(package_format)
        if not isinstance(name, str) or not _PACKAGE_NAME.match(name):
            raise ManifestError(f"{where}.{package_format} is {name!r}, not a package name")
        names[package_format] = name
    command, paths = item.get("command"), item.get("paths") or []
    if (command is None) == (not paths):
        raise ManifestError(f"{where} needs exactly one of command and paths (how preflight sees it is there)")
    if not isinstance(paths, list) or not all(isinstance(p, str) and p.startswith("/") for p in paths):
        raise ManifestError(f"{where}.paths must be a list of absolute paths")
    return OsPackage(key, layer, names, None if command is None else str(command), tuple(paths))


def parse_os_packages(data, source: str = "stack manifest") -> tuple[OsPackage, ...]:
    """The manifest's `os_packages` mapping (key -> layer, deb, rpm, command | paths); ManifestError naming the
    entry when one is malformed."""
    if data is None:
        return ()
    if not isinstance(data, dict):
        raise ManifestError(f"{source}: os_packages must be a mapping of key -> package")
    return tuple(_entry(str(key), item, source) for key, item in data.items())


def package_format(os_like: list[str] | tuple[str, ...]) -> str:
    """deb for a Debian-like OS (its os-release ID and ID_LIKE), rpm for every other the preflight accepts."""
    return "deb" if DEB_LIKE & {str(name).lower() for name in os_like} else "rpm"


def commands(packages: tuple[OsPackage, ...], layers: tuple[str, ...] | list[str]) -> dict[str, dict[str, str]]:
    """Preflight's tools: command -> {deb: package, rpm: package}, for the packages of these layers that have one."""
    return {p.command: dict(p.names) for p in packages if p.layer in layers and p.command}


def installed(text: str, package_format: str) -> set[str]:
    """The installed package names in DPKG_QUERY's (deb) or RPM_QUERY's (rpm) output."""
    if package_format == "rpm":
        return {line.strip() for line in text.splitlines() if line.strip()}
    names = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, tab, status = line.partition("\t")
        if not tab:
            raise ParseError("dpkg-query", "not 'package<TAB>status'", number, line[:80])
        if status.strip() == "installed":
            names.add(name.strip().split(":")[0])   # libpci3:amd64 -> libpci3
    return names


def plan(packages: tuple[OsPackage, ...], *, package_format: str, kernel: str, installed_names: set[str],
         kernel_headers_found: bool, layers: tuple[str, ...] | list[str] = LAYERS) -> list[str]:
    """The packages to install, in manifest order: those of the layers the node's package database does not list;
    the kernel headers only when none of their directories exists (a site kernel may have no package at all)."""
    wanted = []
    for package in packages:
        if package.layer not in layers:
            continue
        name = package.name(package_format, kernel)
        if package.paths and "{kernel}" in "".join(package.paths):
            if not kernel_headers_found:
                wanted.append(name)
        elif name not in installed_names and name not in wanted:
            wanted.append(name)
    return wanted


def kernel_header_paths(packages: tuple[OsPackage, ...]) -> list[str]:
    """The directories one of which holds the running kernel's headers ({kernel} left for the node to fill)."""
    return [path for p in packages if "{kernel}" in "".join(p.paths) for path in p.paths]
