"""The files of the stand-in source checkouts the simulated mirror serves (vLLM, vllm-ascend, verl), as text:
each shaped like the upstream file it stands for, named next to it, with only what the product touches."""

from __future__ import annotations


VLLM_SETUP = '''"""vLLM source stand-in (dapo-ops simulated fleet)."""
import os
from setuptools import setup

target = os.environ.get("VLLM_TARGET_DEVICE", "cuda")
if target != "empty":
    raise RuntimeError(
        "Cannot find CUDA_HOME. CUDA must be available to build the package. "
        "(On Ascend build vLLM with VLLM_TARGET_DEVICE=empty.)")
# vLLM setup.py get_vllm_version(): the version comes from the tag, and a build for no device gets a local label:
# `if envs.VLLM_TARGET_DEVICE == "empty": version += f"{{sep}}empty"` (sep is "." when there is a "+" already).
version = "{version}"
version += ("." if "+" in version else "+") + "empty"
# get_requirements(): `if _no_device(): requirements = _read_requirements("common.txt")` (comments and blank lines
# dropped); the stand-in's requirements/common.txt is the real file at the tag (stack/lock/vllm.in).
HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "requirements", "common.txt")) as f:
    requirements = [line.split("#", 1)[0].strip() for line in f]
setup(name="vllm", version=version, packages=["vllm"], install_requires=[r for r in requirements if r])
'''

VLLM_ASCEND_SETUP = '''"""vllm-ascend source stand-in (dapo-ops simulated fleet).

vllm-ascend's setup.py (at the pinned tag) builds the C++17 custom ops, CMakeExtension "vllm_ascend.vllm_ascend_C"
(COMPILE_CUSTOM_KERNELS defaults to 1, vllm_ascend/envs.py), with the CANN toolchain that
ascend-toolkit/set_env.sh puts in the environment (ASCEND_HOME_PATH, handed to CMake), and for an editable
install it installs the library into the source tree (vllm_ascend/). The stand-in builds its vllm_ascend_C only
when the CANN environment is sourced at install time; otherwise the package installs without it and
vllm_ascend/device_allocator/camem.py logs "Failed to import vllm_ascend_C ... Sleep mode will be disabled".
(A real build without the environment fails in CMake or the compiler, or yields no usable library: either way
there is no vllm_ascend_C, which is what the provisioning must not miss.)
"""
import os
import sys

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
EXTENSION = os.path.join(HERE, "vllm_ascend", "vllm_ascend_C.py")
compile_custom_kernels = bool(int(os.getenv("COMPILE_CUSTOM_KERNELS", "1")))
cann = os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME")
if compile_custom_kernels and cann:
    # setup.py also runs when pip only prepares metadata (a --dry-run plan): like CMake with nothing to rebuild, an
    # up-to-date library is left as it is
    try:
        with open(EXTENSION) as old:
            current = old.read()
    except OSError:
        current = None
    if current != {extension!r}:
        with open(EXTENSION, "w") as out:
            out.write({extension!r})
else:
    if os.path.exists(EXTENSION):
        os.remove(EXTENSION)
    if compile_custom_kernels:
        print("No ASCEND_HOME_PATH found in your environment (source ascend-toolkit/set_env.sh): "
              "vllm_ascend_C is not built", file=sys.stderr)

# get_requirements(): requirements.txt, comments and blank lines dropped (the real file at the tag,
# stack/lock/vllm_ascend.in).
with open(os.path.join(HERE, "requirements.txt")) as f:
    requirements = [line.split("#", 1)[0].strip() for line in f]
setup(name="vllm_ascend", version="{version}", packages=["vllm_ascend"],
      install_requires=[r for r in requirements if r])
'''

VLLM_ASCEND_INIT = '''"""vllm-ascend stand-in: refuses to load next to a vLLM it was not released for."""
__version__ = "{version}"

import vllm

if vllm.__version__ != "{vllm}":
    raise ImportError("vllm-ascend %s requires vLLM {vllm}, found %s" % (__version__, vllm.__version__))
'''

VERL_SETUP = '''"""verl source stand-in (dapo-ops simulated fleet).

Like verl's setup.py (and pyproject.toml [tool.setuptools.dynamic]) at the pinned tag, the version is read from
verl/version/version, so the checkout installs as the version that file declares (PEP 440 normalised).
"""
import os

from setuptools import find_packages, setup

version_folder = os.path.dirname(os.path.join(os.path.abspath(__file__)))
with open(os.path.join(version_folder, "verl/version/version")) as f:
    __version__ = f.read().strip()

setup(name="verl", version=__version__, packages=find_packages(include=["verl", "verl.*"]),
      package_data={{"": ["version/*"], "verl": ["trainer/config/*.yaml", "trainer/config/*/*.yaml"]}},
      install_requires={install_requires!r})
'''

VERL_INIT = '''"""verl stand-in package (dapo-ops simulated fleet): the real trainer configuration, no trainer code.
__version__ is read from version/version, as verl/__init__.py does."""
import os

version_folder = os.path.dirname(os.path.join(os.path.abspath(__file__)))
with open(os.path.join(version_folder, "version/version")) as f:
    __version__ = f.read().strip()
'''

VLLM_ASCEND_CAMEM = '''"""vllm-ascend stand-in of v0.11.0rc1 vllm_ascend/device_allocator/camem.py: the parts the job depends on."""
import logging
import os

logger = logging.getLogger(__name__)

camem_available = False
try:
    from vllm_ascend.vllm_ascend_C import (  # noqa: F401
        init_module, python_create_and_map, python_unmap_and_release)
    camem_available = True
except ImportError as e:
    logger.warning("Failed to import vllm_ascend_C:%s. Sleep mode will be disabled. ", e)
    init_module = None
    python_create_and_map = None
    python_unmap_and_release = None


class CaMemAllocator:
    instance = None
    default_tag = "default"

    @staticmethod
    def get_instance():
        if CaMemAllocator.instance is None:
            CaMemAllocator.instance = CaMemAllocator()
        return CaMemAllocator.instance

    def __init__(self):
        conf = os.environ.get("PYTORCH_NPU_ALLOC_CONF", "")
        assert "expandable_segments:True" not in conf, \\
            ("Expandable segments are not compatible with memory pool. "
             "Please track https://github.com/pytorch/pytorch/issues/147851 "
             "for the latest updates.")

    def get_current_usage(self):
        return 0

    def use_memory_pool(self, tag=None):
        init_module(None, None)  # upstream: get_pluggable_allocator; without vllm_ascend_C this is None
        from contextlib import nullcontext
        return nullcontext()
'''

VLLM_ASCEND_WORKER = '''"""vllm-ascend stand-in of v0.11.0rc1 vllm_ascend/worker/worker_v1.py: NPUWorker.load_model's memory pool, and
the TASK_QUEUE_ENABLE rule of ACL graph mode.

Graph mode (enforce_eager false) with TASK_QUEUE_ENABLE=2: verl's Ascend optimisation notes say it must be 1 and
that it errors otherwise (volcengine/verl docs/ascend_tutorial/ascend_optimization_pratice/
gspo_optimization_practice.md); the upstream error text is not published there, so this message is the
simulator's own."""
import os

from vllm_ascend.device_allocator.camem import CaMemAllocator


class NPUWorker:
    def __init__(self, enable_sleep_mode=True, enforce_eager=False):
        self.enable_sleep_mode = enable_sleep_mode
        self.enforce_eager = enforce_eager

    def load_model(self):
        if not self.enforce_eager and os.environ.get("TASK_QUEUE_ENABLE", "1") == "2":
            raise RuntimeError("ACL graph capture failed: TASK_QUEUE_ENABLE=2 is not supported in graph mode "
                               "(simulated; set TASK_QUEUE_ENABLE=1 or enforce_eager=True)")
        if self.enable_sleep_mode:
            allocator = CaMemAllocator.get_instance()
            assert allocator.get_current_usage() == 0, "Sleep mode can only be used for one instance per process."
            allocator.use_memory_pool(tag="weights")
'''
