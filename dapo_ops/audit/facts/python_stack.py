import json
import shlex

from dapo_ops.audit.fact import Fact
from dapo_ops.errors import ParseError

# Asked only when the node has no fact file (written by the verify role): the env's distributions, no imports.
QUERY = ("import importlib.metadata as m, json, sys; d = {}\n"
         "for n in ('numpy', 'torch', 'torch_npu', 'vllm', 'vllm_ascend', 'verl', 'ray', 'protobuf'):\n"
         "    try: d[n] = m.version(n)\n"
         "    except m.PackageNotFoundError: d[n] = None\n"
         "print(json.dumps({'source': 'query', 'python': '%d.%d.%d' % sys.version_info[:3], 'packages': d}))")


def command(ctx) -> str:
    fact, python = shlex.quote(ctx.fact_file), shlex.quote(ctx.python)
    return (f"if [ -r {fact} ]; then cat {fact}; elif [ -x {python} ]; then {python} -c {shlex.quote(QUERY)}; "
            "else (exit 3); fi")


def parse(output: str) -> dict:
    try:
        data = json.loads(output)
    except ValueError as exc:
        raise ParseError("python stack (fact file or query)", f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("packages"), dict):
        raise ParseError("python stack (fact file or query)", "no 'packages' mapping")
    return {"source": data.get("source", "fact-file"), "python": data.get("python"), "packages": data["packages"],
            "import_errors": data.get("import_errors") or {}, "torch_cxx11_abi": data.get("torch_cxx11_abi"),
            "atb_cxx_abi": data.get("atb_cxx_abi"), "atb_home_path": data.get("atb_home_path")}


FACT = Fact(
    name="python_stack",
    description="the env's Python stack: the fact file the verify role wrote, else a quick version query",
    command=command,
    parse=parse,
    absent_codes=(3,),  # neither a fact file nor the environment
)
