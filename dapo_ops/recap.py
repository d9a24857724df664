"""Read ansible-playbook's PLAY RECAP (pure)."""

from __future__ import annotations

import re

_LINE = re.compile(r"^(?P<host>\S+)\s+:\s+(?P<counts>(?:\w+=\d+\s*)+)$")


def parse_recap(output: str) -> dict[str, dict[str, int]]:
    """host -> {ok, changed, unreachable, failed, skipped, rescued, ignored} from the last PLAY RECAP."""
    _, _, tail = output.rpartition("PLAY RECAP")
    recap = {}
    for line in tail.splitlines():
        match = _LINE.match(line.strip())
        if match:
            recap[match.group("host")] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group("counts"))}
    return recap
