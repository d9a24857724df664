"""An audit fact: a shell command run on a node plus a pure parser of its output (pyinfra's facts, in shape).

Each module in dapo_ops.audit.facts defines FACT = Fact(...); adding a fact is adding a file there (and a data
file under tests/data/facts/<name>/ with a recorded output and the expected result).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable

from dapo_ops.errors import ParseError


@dataclass(frozen=True)
class NodeContext:
    """What a fact's command needs to know about the node."""

    install_path: str
    python: str                          # the stack environment's python
    fact_file: str
    env_script: str = ""               # the CANN environment script every job sources
    import_sweep_args: tuple[str, ...] = ()   # dapo_ops.stack.imports.sweep_arguments for this node


@dataclass(frozen=True)
class Fact:
    name: str
    description: str
    command: Callable[..., str]          # (ctx) -> str, or (ctx, npu) -> str when per_npu
    parse: Callable[[str], Any]          # pure; raises ParseError on malformed output
    per_npu: bool = False
    absent_codes: tuple[int, ...] = ()   # exit codes that mean "not installed / not there": the value is None
    ok_codes: tuple[int, ...] = (0,)     # exit codes whose output is parsed
    beside_tools: bool = False           # touches no device: may run while the device tools run (the Python probes)

    def key(self, npu: int | None = None) -> str:
        return self.name if npu is None else f"{self.name}.{npu}"

    def command_for(self, ctx: NodeContext, npu: int | None = None) -> str:
        return self.command(ctx, npu) if self.per_npu else self.command(ctx)

    def value(self, rc: int, output: str, where: str) -> Any:
        """The parsed value for one run: None when absent, ParseError when it failed or does not parse."""
        if rc in self.absent_codes:
            return None
        if rc not in self.ok_codes:
            lines = [line for line in output.strip().splitlines() if line.strip()]
            raise ParseError(where, f"exit code {rc}" + (f": {lines[-1].strip()}" if lines else ""))
        try:
            return self.parse(output)
        except ParseError as exc:  # name where the output came from (a bundle file, a host's command)
            raise ParseError(where, exc.reason, exc.line_no, exc.line) from None


def all_facts() -> dict[str, Fact]:
    """Every fact module in dapo_ops.audit.facts, by name."""
    from dapo_ops.audit import facts as package

    found = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        fact = getattr(module, "FACT", None)
        if isinstance(fact, Fact):
            found[fact.name] = fact
    return found
