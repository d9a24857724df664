"""The NPU runtime environment a job needs, derived from the job rather than copied from a blog post (pure).

- TASK_QUEUE_ENABLE: torch_npu's operator-dispatch queue. verl's Ascend optimisation notes (volcengine/verl,
  docs/ascend_tutorial/ascend_optimization_pratice/gspo_optimization_practice.md, newer than our pin) say graph mode
  needs 1 ("图模式设置为1 ... 非图模式设置为2", and with ACL graph on, TASK_QUEUE_ENABLE "must be 1, otherwise it
  errors"); vllm-ascend's ACL-graph tests set 1 (v0.11.0rc1 tests/e2e/multicard/test_single_request_aclgraph.py) and
  its tuning guide's 2 is for eager mode. So: 1 when the vLLM rollout runs in graph mode (enforce_eager false), 2
  when eager.
- PYTORCH_NPU_ALLOC_CONF=expandable_segments:True kills vLLM's sleep mode: vllm-ascend v0.11.0rc1
  vllm_ascend/device_allocator/camem.py asserts it is absent ("Expandable segments are not compatible with memory
  pool") when the worker builds its CaMemAllocator (vllm_ascend/worker/worker_v1.py, with enable_sleep_mode), and
  verl turns sleep mode on by default (v0.7.0 verl/workers/config/rollout.py: `enable_sleep_mode: bool = True`).
- VLLM_ASCEND_ENABLE_NZ with sleep mode: vllm-ascend v0.11.0rc1 vllm_ascend/worker/worker_v1.py `wake_up` raises
  "FRACTAL_NZ mode is enabled. ... Please set VLLM_ASCEND_ENABLE_NZ=0." (its own default, vllm_ascend/envs.py, is 1;
  the render always exports the spec's value, 0 by default).
- HCCL_CONNECT_TIMEOUT is an integer in [120, 7200] s and HCCL_EXEC_TIMEOUT in [0, 2147483647] s on Atlas A2 (0: no
  timeout): the pinned CANN's environment variable reference, hiascend canncommercial/83RC1 maintenref/envvar
  envref_07_0149 (HCCL_CONNECT_TIMEOUT) and the HCCL_EXEC_TIMEOUT page beside it.
- A rollout quantization: verl v0.7.0 verl/workers/rollout/vllm_rollout/vllm_async_server.py accepts only fp8 and
  torchao, and vllm-ascend v0.11.0rc1 vllm_ascend/platform.py lists only "ascend" (`supported_quantization`), which
  vLLM's `verify_quantization` (vllm/platforms/interface.py) enforces: no value works with both.
"""

from __future__ import annotations

from dapo_ops.job.composed import read
from dapo_ops.job.spec import JobSpec

GRAPH_MODE_TASK_QUEUE = 1
EAGER_TASK_QUEUE = 2
EXPANDABLE_SEGMENTS = "expandable_segments:True"
# Set only through their own spec fields: an env.extra copy would bypass the checks below (and env.sh exports
# env.extra last, so it would win).
OWN_FIELDS = {"TASK_QUEUE_ENABLE": "env.task_queue_enable", "PYTORCH_NPU_ALLOC_CONF": "env.pytorch_npu_alloc_conf",
              "HCCL_CONNECT_TIMEOUT": "env.hccl_connect_timeout", "HCCL_EXEC_TIMEOUT": "env.hccl_exec_timeout",
              "VLLM_ASCEND_ENABLE_NZ": "env.vllm_ascend_enable_nz", "VLLM_USE_V1": "env.vllm_use_v1",
              "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "env.ray_noset_ascend_rt_visible_devices"}
ROLLOUT = "actor_rollout_ref.rollout"
CANN_ENV_PAGE = "CANN's environment variable reference, hiascend canncommercial/83RC1 maintenref/envvar"
HCCL_TIMEOUT_RANGES = {"hccl_connect_timeout": ("HCCL_CONNECT_TIMEOUT", 120, 7200),
                       "hccl_exec_timeout": ("HCCL_EXEC_TIMEOUT", 0, 2147483647)}
VERL_ROLLOUT_QUANTIZATION = ("fp8", "torchao")      # verl vllm_async_server.py _SUPPORTED_QUANTIZATION
VLLM_ASCEND_QUANTIZATION = ("ascend",)               # vllm_ascend/platform.py NPUPlatform.supported_quantization


def task_queue_enable(spec: JobSpec) -> int:
    """The spec's value, else 1 in graph mode and 2 in eager mode."""
    if spec.env.task_queue_enable is not None:
        return spec.env.task_queue_enable
    return EAGER_TASK_QUEUE if spec.rollout.enforce_eager else GRAPH_MODE_TASK_QUEUE


def _rollout(composed: dict | None, key: str, default):
    return read(composed, f"{ROLLOUT}.{key}", default)


def env_problems(spec: JobSpec, composed: dict | None) -> list[str]:
    """What in the job's NPU environment would stop it after the NPUs are allocated. `composed` is verl's composed
    configuration (None when it could not be composed: verl's defaults are assumed)."""
    problems = []
    for key, field in OWN_FIELDS.items():
        if key in spec.env.extra:
            problems.append(f"env.extra.{key}: set {field} instead (dapo-ops checks it against the rollout)")
    eager = bool(_rollout(composed, "enforce_eager", spec.rollout.enforce_eager))
    if eager != spec.rollout.enforce_eager:
        problems.append(f"{ROLLOUT}.enforce_eager is overridden to {eager}: set rollout.enforce_eager in the spec "
                        "instead, so TASK_QUEUE_ENABLE follows it")
    queue = task_queue_enable(spec)
    if not eager and queue != GRAPH_MODE_TASK_QUEUE:
        problems.append(f"env.task_queue_enable is {queue} but the vLLM rollout runs in graph mode "
                        f"(rollout.enforce_eager false), which needs TASK_QUEUE_ENABLE=1: remove env.task_queue_enable "
                        "(dapo-ops derives it) or set rollout.enforce_eager true")
    name = _rollout(composed, "name", spec.rollout.name)
    sleep = bool(_rollout(composed, "enable_sleep_mode", True))
    alloc = spec.env.pytorch_npu_alloc_conf or ""
    if name == "vllm" and sleep and EXPANDABLE_SEGMENTS in alloc:
        problems.append(f"env.pytorch_npu_alloc_conf {alloc!r}: vllm-ascend's sleep mode (on by default in verl) "
                        "asserts 'Expandable segments are not compatible with memory pool': remove "
                        "expandable_segments:True")
    if name == "vllm" and sleep and spec.env.vllm_ascend_enable_nz:
        problems.append(f"env.vllm_ascend_enable_nz is {spec.env.vllm_ascend_enable_nz} while the vLLM rollout uses "
                        "sleep mode (on by default in verl): vllm-ascend's wake_up raises 'FRACTAL_NZ mode is "
                        "enabled ... Please set VLLM_ASCEND_ENABLE_NZ=0' at the first weight sync: set it to 0")
    for field, (variable, low, high) in HCCL_TIMEOUT_RANGES.items():
        value = getattr(spec.env, field)
        if not low <= value <= high:
            problems.append(f"env.{field}: {value} is outside {variable}'s range [{low}, {high}] s ({CANN_ENV_PAGE})")
    quantization = _rollout(composed, "quantization", None)
    if name == "vllm" and quantization is not None:
        problems.append(f"{ROLLOUT}.quantization {quantization!r} cannot work on the NPUs: verl's vLLM rollout takes "
                        f"only {' or '.join(VERL_ROLLOUT_QUANTIZATION)} (vllm_async_server.py) and vllm-ascend only "
                        f"{' or '.join(VLLM_ASCEND_QUANTIZATION)} (platform.py); remove the override")
    return problems
