"""Every audit fact, tested by data files: tests/data/facts/<fact>/<case>.yml holds the command, a recorded
output with its exit code, and the expected value (or the expected error)."""

from pathlib import Path

import pytest
import yaml

from dapo_ops.audit.collect import collection_script, split_sections
from dapo_ops.audit.fact import NodeContext, all_facts
from dapo_ops.errors import ParseError

DATA = Path(__file__).parent.parent / "data" / "facts"
CTX = NodeContext(install_path="/usr/local/Ascend", python="/opt/miniconda3/envs/dapo/bin/python",
                  fact_file="/etc/ansible/facts.d/dapo_ops.fact", env_script="/usr/local/Ascend/dapo-ops-env.sh")
CASES = sorted(DATA.glob("*/*.yml"))


def test_every_fact_has_data_files():
    assert set(all_facts()) == {p.name for p in DATA.iterdir() if p.is_dir()}


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_fact_case(path):
    case = yaml.safe_load(path.read_text())
    fact = all_facts()[path.parent.name]
    npu = case.get("npu")
    if "command" in case:
        assert fact.command_for(CTX, npu) == case["command"]
    if "error" in case:
        with pytest.raises(ParseError) as err:
            fact.value(case["rc"], case["output"], f"{path.name}")
        assert case["error"] in str(err.value)
        assert path.name in str(err.value)
    else:
        assert fact.value(case["rc"], case["output"], path.name) == case["expected"]


def test_collection_script_round_trip():
    """The markers split a host's combined output back into each fact's exit code and output."""
    import subprocess

    script = collection_script(CTX, npus=2)
    per_npu = sum(f.per_npu for f in all_facts().values())
    assert script.count("@@dapo-fact@@") == len(all_facts()) + per_npu  # per-NPU facts run once per NPU
    fake = ("npu-smi() { echo \"npu-smi $*\"; return 7; }; "
            "cat() { echo \"cat $*\"; [ \"$1\" != /usr/local/Ascend/nnal/atb/latest/version.info ]; }; ")
    hccn = CTX.install_path + "/driver/tools/hccn_tool"
    result = subprocess.run(["bash", "-c", fake + script.replace(hccn, "echo hccn")], capture_output=True, text=True)
    sections = split_sections(result.stdout)
    assert sections["npu_smi_info"] == (7, "npu-smi info\n")
    assert sections["board.1"] == (7, "npu-smi info -t board -i 1\n")
    assert sections["link.0"] == (0, "hccn -i 0 -link -g\n")
    assert sections["nnal_info"][0] == 1
    assert len(sections) == script.count("@@dapo-fact@@")
