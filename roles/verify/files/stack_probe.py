"""Import the stack inside the environment (with the CANN environment sourced) and print what it finds."""
import importlib
import importlib.metadata as metadata
import json
import os
import sys

report = {"python": "%d.%d.%d" % sys.version_info[:3], "imports": {}, "versions": {}, "errors": {}}
for module in sys.argv[1:]:
    try:
        imported = importlib.import_module(module)
        report["imports"][module] = getattr(imported, "__version__", None)
    except Exception as exc:  # every failure is reported, none stops the probe
        report["errors"][module] = "%s: %s" % (type(exc).__name__, exc)
for dist in ("numpy", "torch", "torch_npu", "vllm", "vllm_ascend", "verl", "ray", "protobuf"):
    try:
        report["versions"][dist] = metadata.version(dist)
    except metadata.PackageNotFoundError:
        report["versions"][dist] = None
try:
    import torch
    report["torch_cxx11_abi"] = bool(torch.compiled_with_cxx11_abi())
except Exception:
    report["torch_cxx11_abi"] = None
report["atb_cxx_abi"] = os.environ.get("ATB_CXX_ABI")
print(json.dumps(report))
