"""A cache of parsed inventories, keyed by every file of the inventory (path, size, mtime), the Ansible config and
the Ansible version, so a second command skips Ansible's import and parse. Only static inventories are cached: an
executable file (a script) or a YAML file naming an inventory `plugin:` is asked afresh every time. The cache holds
host variables, so it is private to the user (0700 directory, 0600 files)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

CACHE_DIR = Path(os.environ.get("DAPO_OPS_CACHE_DIR") or Path.home() / ".cache" / "dapo-ops") / "inventory"
_PLUGIN = re.compile(rb"^plugin:", re.MULTILINE)
_MAX_FILES = 2000


def _files(source: Path) -> list[Path] | None:
    if source.is_file():
        return [source]
    found = []
    for root, dirs, names in os.walk(source):
        dirs.sort()
        found.extend(Path(root) / name for name in sorted(names))
        if len(found) > _MAX_FILES:
            return None
    return found


def _static(path: Path, stat: os.stat_result) -> bool:
    if stat.st_mode & 0o111:
        return False
    if path.suffix in (".yml", ".yaml"):
        with open(path, "rb") as handle:
            return not _PLUGIN.search(handle.read(1 << 20))
    return True


def _ansible_config() -> str:
    for candidate in (os.environ.get("ANSIBLE_CONFIG"), "ansible.cfg", str(Path.home() / ".ansible.cfg"),
                      "/etc/ansible/ansible.cfg"):
        if candidate and os.path.isfile(candidate):
            stat = os.stat(candidate)
            return f"{os.path.abspath(candidate)}:{stat.st_size}:{stat.st_mtime_ns}"
    return ""


def cache_key(source: Path) -> str | None:
    """The key for a static inventory, or None when it must not be cached."""
    from importlib.metadata import PackageNotFoundError, version

    files = _files(source)
    if files is None:
        return None
    digest = hashlib.sha256()
    try:
        digest.update(f"{version('ansible-core')}\0{source.resolve()}\0{_ansible_config()}\0".encode())
    except PackageNotFoundError:
        return None
    for path in files:
        stat = path.stat()
        if not _static(path, stat):
            return None
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def read(key: str) -> dict | None:
    try:
        return json.loads((CACHE_DIR / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None


def write(key: str, raw: dict) -> None:
    """Best effort: an unwritable cache only costs the next command a parse."""
    try:
        CACHE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = CACHE_DIR / f".{key}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(raw, handle)
        tmp.replace(CACHE_DIR / f"{key}.json")
    except OSError:
        pass
