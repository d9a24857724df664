"""Every distribution installed in the node's env (for the audit of the whole closure against the lock)."""

import json
import re
import shlex

from dapo_ops.audit.fact import Fact
from dapo_ops.errors import ParseError

# One interpreter start, no imports of the packages themselves: importlib.metadata reads the *.dist-info /
# *.egg-info directories on sys.path (an editable install is listed by its dist-info too). The first distribution
# of a name wins, as it is the one `import` finds (sys.path order). Names are PEP 503 normalised.
QUERY = ("import importlib.metadata as m, json, platform, re, sys; d = {}\n"
         "for x in m.distributions():\n"
         "    n = x.metadata['Name']\n"
         "    if n: d.setdefault(re.sub(r'[-_.]+', '-', n).lower(), x.version)\n"
         "print(json.dumps({'machine': platform.machine(), 'python': '%d.%d.%d' % sys.version_info[:3],"
         " 'dists': d}, sort_keys=True))")
WHAT = "python dists (env python)"


def command(ctx) -> str:
    python = shlex.quote(ctx.python)
    return f"if [ -x {python} ]; then {python} -c {shlex.quote(QUERY)}; else (exit 3); fi"


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(output: str) -> dict:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    try:
        data = json.loads(lines[-1]) if lines else None
    except ValueError as exc:
        raise ParseError(WHAT, f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("dists"), dict):
        raise ParseError(WHAT, "no 'dists' mapping")
    if not isinstance(data.get("machine"), str) or not data["machine"]:
        raise ParseError(WHAT, "no 'machine'")
    dists = {}
    for name, version in data["dists"].items():
        if not isinstance(name, str) or not isinstance(version, str):
            raise ParseError(WHAT, f"dist {name!r} has no version string")
        dists.setdefault(_normalize(name), version)
    return {"machine": data["machine"], "python": data.get("python"), "dists": dists}


FACT = Fact(
    name="python_dists",
    description="every distribution installed in the env (name -> version), the platform machine and Python",
    command=command,
    parse=parse,
    absent_codes=(3,),  # no environment
    beside_tools=True,
)
