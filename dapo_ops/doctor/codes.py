"""Decoding the codes Ascend software prints, and `dapo-ops doctor explain CODE`.

- CANN error-message codes, `E` + module letter + 4 digits (EI0006); the module letters doctor names are the ones
  its signatures and MindCluster FaultDiag's knowledge base attribute (Ascend/mind-cluster
  component/ascend-faultdiag/src/ascend_fd/configuration/kg-config.json).
- ACL return codes, 6 digits: the first digit is the class (1 parameter, 2 resource, 3 storage, 5 internal), and
  x07xxx are the runtime's own (hicann/runtime include/external/acl/error_codes/rt_error_codes.h).
- torch_npu's ERRxxyyy: xx the submodule, yyy the class (Ascend/pytorch torch_npu/utils/error_code.py,
  docs/zh/troubleshooting/error_code_information.md).
- HcclResult numbers (hicann/hccl docs/api/context/HcclResult.md).
- Chip fault event ids, 0x + 8 hex digits: only what the signatures know.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dapo_ops.doctor.signatures import Catalog
from dapo_ops.errors import UsageError

# HcclResult, in our words: value -> what it means
HCCL_RESULTS = {
    0: "success", 1: "bad parameter", 2: "null pointer", 3: "memory error", 4: "internal error",
    5: "feature not supported", 6: "resource not found", 7: "resource unavailable", 8: "system call failed",
    9: "timeout", 10: "cannot open a file", 11: "TCP connect failed", 12: "RoCE connect failed",
    13: "TCP transfer failed", 14: "RoCE transfer failed", 15: "a runtime call failed", 16: "a driver call failed",
    17: "a profiling call failed", 18: "a CCE call failed", 19: "a network call failed", 20: "try again",
    21: "RDMA completion error (error CQE)", 22: "communicator suspending",
}
TORCH_NPU_SUBMODULES = {0: "PTA (the framework adapter)", 1: "OPS (operators)", 2: "DIST (distributed)",
                        3: "GRAPH (graph mode)", 4: "PROF (profiling)", 99: "UNKNOWN (outside torch_npu)"}
TORCH_NPU_CLASSES = {
    0: "success", 1: "invalid parameter", 2: "invalid type", 3: "invalid value", 4: "invalid pointer",
    5: "internal error", 6: "memory error", 7: "feature not supported", 8: "resource not found",
    9: "resource unavailable", 10: "system call failed", 11: "timeout", 12: "permission error",
    100: "an ACL (CANN runtime) call failed: the CANN code before it says why",
    200: "an HCCL call failed: the HCCL/CANN code before it says why",
    300: "a GE (graph engine) call failed", 999: "an exception from the application or another library",
}
ACL_CLASSES = {1: "parameter check failed", 2: "resource problem (memory, device, streams)",
               3: "storage limit", 5: "internal error"}
CANN_MODULES = {"I": "HCCL (collective communication)", "J": "HCCP (HCCL's process on the NPU)",
                "L": "memory / device allocation", "E": "runtime", "H": "runtime", "Z": "operator (AI Core kernels)"}

CANN_CODE = re.compile(r"^[EW][A-Z0-9]\d{4}$")
ACL_CODE = re.compile(r"^[1-5]\d{5}$")
TORCH_NPU_CODE = re.compile(r"^ERR(\d{2})(\d{3})$")
HCCL_CODE = re.compile(r"^(?:HCCL|HCCLRESULT|HCCL_RESULT)[\s:=_-]*(\d{1,2})$")
HEX_CODE = re.compile(r"^0X[0-9A-F]{8}$")


@dataclass
class Explanation:
    code: str
    kind: str
    decoded: list[str] = field(default_factory=list)
    signatures: list[dict] = field(default_factory=list)

    @property
    def known(self) -> bool:
        return bool(self.signatures)


def hccl_result(value: int) -> str:
    return f"HcclResult {value} ({HCCL_RESULTS.get(value, 'not a documented HcclResult')})"


def torch_npu_code(code: str) -> str:
    found = TORCH_NPU_CODE.match(code.upper())
    if not found:
        return code
    submodule, kind = int(found[1]), int(found[2])
    return (f"{code}: torch_npu {TORCH_NPU_SUBMODULES.get(submodule, f'submodule {submodule:02d}')}, "
            f"{TORCH_NPU_CLASSES.get(kind, f'class {kind:03d}')}")


def acl_code(value: int) -> str:
    text = str(value)
    kind = ACL_CLASSES.get(int(text[0]), "unknown class")
    owner = "the runtime (x07xxx)" if text[1:3] == "07" else "ACL"
    return f"ACL {value}: {kind}, reported by {owner}"


def cann_code(code: str) -> str:
    level = "error" if code[0] == "E" else "warning"
    module = CANN_MODULES.get(code[1], f"module letter {code[1]}")
    return f"CANN {level} message {code}: {module}"


def decode_details(details: dict[str, str]) -> list[str]:
    """Readable words for the numbers a signature's regex captured."""
    words = []
    if "hccl_result" in details:
        words.append(hccl_result(int(details["hccl_result"])))
    if "torch_npu_err" in details:
        words.append(torch_npu_code(details["torch_npu_err"]))
    if "cann_code" in details:
        words.append(cann_code(details["cann_code"]))
    if "peer_ip" in details:
        words.append(f"the peer HCCL names: {details['peer_ip']} device {details.get('peer_device', '?')}")
    return words + _named_details(details)


def _named_details(details: dict[str, str]) -> list[str]:
    """The names a signature's regex captured (an operator, a port, a version requirement), in words."""
    words = []
    if "acl_code" in details:
        call = f"{details['acl_call']}: " if "acl_call" in details else ""
        words.append(call + acl_code(int(details["acl_code"])))
    if "op" in details:
        words.append(f"operator {details['op']}")
    if "port" in details:
        words.append(f"port {details['port']}")
    if "requirement" in details:
        words.append(f"needs {details['requirement']}, found {details.get('found', '?')}")
    if "name" in details:
        words.append(f"{details.get('module', 'the module')} has no {details['name']}")
    for key, label in (("function", "function"), ("chardev", "device file"), ("proto", "generated code")):
        if key in details:
            words.append(f"{label} {details[key]}")
    return words


def normalise(words: list[str]) -> tuple[str, str]:
    """(kind, canonical code) of what the user typed; a usage error when it is no code doctor can read."""
    text = " ".join(words).strip().upper()
    if CANN_CODE.match(text):
        return "cann", text
    if ACL_CODE.match(text):
        return "acl", text
    if TORCH_NPU_CODE.match(text):
        return "torch_npu", text
    hccl = HCCL_CODE.match(text)
    if hccl:
        return "hccl", hccl[1]
    if HEX_CODE.match(text):
        return "chip", "0x" + text[2:]
    raise UsageError(f"{' '.join(words) or 'nothing'!r} is not a code doctor reads: give a CANN code (EI0006), an "
                     "ACL code (507033), a torch_npu code (ERR02200), an HCCL result (HCCL 11) or a chip fault code "
                     "(0x80E01801)")


def _generic(text: str) -> str:
    """A fix without an event to fill it from: the node and NPU stay placeholders."""
    return text.replace("{node}", "NODE").replace("{npu}", "N").replace("{rank}", "N")


def explain(words: list[str], catalog: Catalog) -> Explanation:
    kind, code = normalise(words)
    explanation = Explanation(code=code if kind != "hccl" else f"HCCL {code}", kind=kind)
    if kind == "cann":
        explanation.decoded.append(cann_code(code))
    elif kind == "acl":
        explanation.decoded.append(acl_code(int(code)))
    elif kind == "torch_npu":
        explanation.decoded.append(torch_npu_code(code))
    elif kind == "hccl":
        explanation.decoded.append(hccl_result(int(code)))
    matches = catalog.with_code(code) if kind != "hccl" else []
    if kind == "hccl":
        matches = [catalog.by_id[i] for i in ("hccl-init-error-code", "hccl-op-error-code") if i in catalog.by_id]
    explanation.signatures = [{"id": s.id, "layer": s.layer, "meaning": s.meaning, "fix": _generic(s.fix),
                               "source": list(s.source), "fatal": s.fatal} for s in matches]
    return explanation
