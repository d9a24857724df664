"""NPU NIC state from hccn_tool output (pure)."""

from __future__ import annotations

from dapo_ops.ascend import parsers
from dapo_ops.errors import ParseError


def nic_problems(outputs: dict[str, dict], npu_ids: list[int]) -> list[str]:
    """outputs: name -> {rc, stdout} for link<N>, net_health<N> (as dapo_node_facts returns them)."""
    problems = []
    for npu in npu_ids:
        for query, parse, good in (("link", parsers.parse_hccn_link, "UP"),
                                   ("net_health", parsers.parse_hccn_net_health, "Success")):
            result = outputs.get(f"{query}{npu}")
            if result is None:
                problems.append(f"npu{npu}: no {query} reading")
                continue
            try:
                value = parse(result.get("stdout", ""), f"hccn_tool -i {npu} -{query} -g")
            except ParseError as exc:
                problems.append(f"npu{npu}: {exc}")
                continue
            if value != good:
                problems.append(f"npu{npu}: {query.replace('_', ' ')} {value}")
    return problems
