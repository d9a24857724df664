"""Where a node's directories live: the nearest existing directory of each (nothing is made) and its filesystem's
free space, from POSIX `df -Pk`. One command per node for any number of directories, and its pure parser; used by
launch's checkpoint-space check and by stage's space check."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from dapo_ops.errors import ParseError

_NEAREST = 'while [ ! -d "$d" ]; do d=$(dirname -- "$d"); done'


def _for_each(body: str, directories: list[str]) -> str:
    script = f'for d in "$@"; do {_NEAREST}; {body}; done'
    return f"sh -c {shlex.quote(script)} sh " + " ".join(shlex.quote(d) for d in directories)


def nearest_command(directories: list[str]) -> str:
    """Prints, per directory, itself or its nearest existing ancestor."""
    return _for_each('printf "%s\\n" "$d"', directories)


def parse_nearest(output: str, directories: list[str]) -> dict[str, str]:
    found = output.splitlines()
    if len(found) != len(directories):
        raise ParseError("nearest existing directory", f"{len(found)} lines for {len(directories)} directories")
    return dict(zip(directories, found))


@dataclass(frozen=True)
class Space:
    directory: str      # the nearest existing directory df looked at
    mount: str          # its filesystem's mount point
    available: int      # bytes available to an unprivileged user


def space_command(directories: list[str]) -> str:
    """Per directory: `dir <nearest existing directory>`, then the df -Pk line of its filesystem."""
    return _for_each("printf 'dir %s\\n' \"$d\"; df -Pk -- \"$d\" | tail -n 1", directories)


def parse_space(output: str, expected: int) -> list[Space]:
    """space_command's output -> one Space per directory, in order. POSIX df -P: the fourth field is the available
    1024-byte blocks, the sixth on the mount point (which may hold spaces)."""
    lines = output.splitlines()
    if len(lines) != 2 * expected:
        raise ParseError("df -Pk", f"{len(lines)} lines for {expected} directories (a 'dir' line and a df line each)")
    spaces = []
    for mark, line in zip(lines[::2], lines[1::2]):
        if not mark.startswith("dir "):
            raise ParseError("df -Pk", "not a 'dir' line", line=mark)
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[3].isdigit():
            raise ParseError("df -Pk", "not a df -P line", line=line)
        spaces.append(Space(mark[4:], fields[5], int(fields[3]) * 1024))
    return spaces
