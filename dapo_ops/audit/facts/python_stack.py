"""The env's Python stack, queried live: the verify role's probe (roles/verify/files/stack_probe.py) run in the env
with the CANN environment script sourced, as a job's processes are. The verify role's record (the fact file) is
read in the same round trip, as a hint only: the stack changes after provisioning (a `pip install` that pulls
numpy 2, vllm-ascend overwriting torch_npu, a failed re-verify that leaves the old record), so the live answer
decides, and a record that disagrees with it is a finding of its own (audit/analyze.py).

Output, in order: `@@fact-file@@`, the record (empty when there is none); `@@env@@ STATE PATH` where STATE is
sourced | failed | missing; anything the imports print; the probe's JSON as the last line.
"""

import json
import shlex

from dapo_ops.audit.fact import Fact
from dapo_ops.errors import ParseError
from dapo_ops.paths import PROJECT_ROOT

PROBE = PROJECT_ROOT / "roles" / "verify" / "files" / "stack_probe.py"
# The imports that fail on CANN / NNAL / torch_npu skew or an unsourced environment: torch_npu's libtorch_npu.so
# needs CANN's libhccl.so and libascendcl.so; vllm_ascend_C links ascendcl and libtorch_npu.so (vllm-ascend's
# CMakeLists.txt at the pinned tag). vllm and verl, pure Python over them and slow to import, are the verify role's
# alone (roles/verify/defaults/main.yml verify_imports).
IMPORTS = ("torch", "torch_npu", "vllm_ascend.vllm_ascend_C")
WHAT = "python stack (live probe)"
ENV_STATES = ("sourced", "failed", "missing")

_RUN = ('printf "@@env@@ %s %s\\n" "$s" "$1"; exec "$2" -c "$3" "${@:4}"')


def command(ctx) -> str:
    fact, python, env = shlex.quote(ctx.fact_file), shlex.quote(ctx.python), shlex.quote(ctx.env_script)
    probe = shlex.quote(PROBE.read_text())
    source = ('if [ -r "$1" ]; then if . "$1" >/dev/null 2>&1; then s=sourced; else s=failed; fi; '
              'else s=missing; fi; ' + _RUN)
    return (f"if [ -x {python} ]; then echo @@fact-file@@; if [ -r {fact} ]; then cat {fact}; fi; echo; "
            f"bash -c {shlex.quote(source)} probe {env} {python} {probe} {' '.join(IMPORTS)}; else (exit 3); fi")


def _fact_file(text: str) -> dict | None:
    """The verify role's record, or {"error": why} when it is there but unreadable."""
    if not text.strip():
        return None
    try:
        data = _json_object(text, "packages")
    except ParseError as exc:
        return {"error": exc.reason}
    return {"packages": data["packages"], "import_errors": data.get("import_errors") or {},
            "python": data.get("python")}


def _json_object(text: str, key: str) -> dict:
    """`text` as a JSON object holding the mapping `key`; ParseError otherwise."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ParseError(WHAT, f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get(key), dict):
        raise ParseError(WHAT, f"no {key!r} mapping")
    return data


def _probe(lines: list[str]) -> dict:
    for line in reversed(lines):
        if line.startswith("{"):
            return _json_object(line, "versions")
    last = next((line for line in reversed(lines) if line.strip()), "no output")
    raise ParseError(WHAT, f"the probe printed no result: {last.strip()}")


def _legacy(output: str) -> dict:
    """A bundle recorded before the live probe: the fact file's (or an older query's) JSON alone."""
    data = _json_object(output, "packages")
    return {"source": data.get("source", "fact-file"), "python": data.get("python"), "packages": data["packages"],
            "import_errors": data.get("import_errors") or {}, "torch_cxx11_abi": data.get("torch_cxx11_abi"),
            "atb_cxx_abi": data.get("atb_cxx_abi"), "atb_home_path": data.get("atb_home_path"),
            "env": None, "env_script": None, "fact_file": None}


def parse(output: str) -> dict:
    if not output.lstrip().startswith("@@fact-file@@"):
        return _legacy(output.strip())
    head, sep, rest = output.lstrip().partition("\n@@env@@ ")
    if not sep:
        raise ParseError(WHAT, "no '@@env@@' line")
    lines = rest.splitlines()
    state, _, env_script = lines[0].partition(" ")
    if state not in ENV_STATES:
        raise ParseError(WHAT, f"unknown environment state {state!r}")
    probe = _probe(lines[1:])
    return {"source": "live", "python": probe.get("python"), "packages": probe["versions"],
            "import_errors": probe.get("errors") or {}, "torch_cxx11_abi": probe.get("torch_cxx11_abi"),
            "atb_cxx_abi": probe.get("atb_cxx_abi"), "atb_home_path": probe.get("atb_home_path"),
            "env": state, "env_script": env_script, "fact_file": _fact_file(head[len("@@fact-file@@"):])}


FACT = Fact(
    name="python_stack",
    description="the env's Python stack, live (imports with the CANN environment sourced), and the verify record",
    command=command,
    parse=parse,
    absent_codes=(3,),  # no environment
    beside_tools=True,
)
