"""Import the stack inside the environment (with the CANN environment sourced) and print what it finds."""
import importlib
import importlib.metadata as metadata
import json
import os
import sys


def atb_cxx_abi(environ):
    """The C++ ABI the sourced NNAL environment selected, as "0"/"1" (None: NNAL not sourced).

    The pinned CANN's nnal/atb/set_env.sh --cxx_abi=N exports ATB_HOME_PATH=<install>/nnal/atb/latest/atb/cxx_abi_N and
    no ATB_CXX_ABI (environment dumps from real nodes, e.g. vllm-project/vllm-ascend issue #4186, on the pinned
    CANN and vllm-ascend), so the ABI is the suffix of ATB_HOME_PATH; ATB_CXX_ABI is used only when it is set.
    """
    explicit = environ.get("ATB_CXX_ABI")
    if explicit in ("0", "1"):
        return explicit
    tail = (environ.get("ATB_HOME_PATH") or "").rstrip("/").rsplit("/", 1)[-1]
    if tail in ("cxx_abi_0", "cxx_abi_1"):
        return tail[-1]
    return None


def main(modules):
    report = {"python": "%d.%d.%d" % sys.version_info[:3], "imports": {}, "versions": {}, "errors": {}}
    for module in modules:
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
    report["atb_home_path"] = os.environ.get("ATB_HOME_PATH")
    report["atb_cxx_abi"] = atb_cxx_abi(os.environ)
    return report


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
