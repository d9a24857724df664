# Rendered by dapo-ops for job qwen3-30b-a3b-dapo on a2-node01; re-render instead of editing.
# The environment of every Ray process on this node: CANN, the HCCL/GLOO/TP network, the NPU runtime knobs.
# shellcheck shell=bash disable=SC1090,SC1091
source /usr/local/Ascend/dapo-ops-env.sh
export HCCL_CONNECT_TIMEOUT=3600
export HCCL_EXEC_TIMEOUT=3600
export HCCL_SOCKET_IFNAME=enp189s0f0
export GLOO_SOCKET_IFNAME=enp189s0f0
export TP_SOCKET_IFNAME=enp189s0f0
export HCCL_IF_IP=198.51.100.11
export RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1
export ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
export VLLM_USE_V1=1
export VLLM_ASCEND_ENABLE_NZ=0
# 1 with the vLLM rollout in graph mode, 2 in eager mode (dapo_ops/job/npu_env.py says why)
export TASK_QUEUE_ENABLE=1
# PYTORCH_NPU_ALLOC_CONF stays unset: expandable_segments:True breaks vLLM's sleep mode (npu_env.py)
unset PYTORCH_NPU_ALLOC_CONF
export RAY_DEDUP_LOGS=0
export HYDRA_FULL_ERROR=1
export VERL_FILE_LOGGER_PATH=/var/log/dapo-ops/jobs/verl-dapo/qwen3-30b-a3b-dapo/metrics-render.jsonl
export TENSORBOARD_DIR=/var/log/dapo-ops/jobs/verl-dapo/qwen3-30b-a3b-dapo/tensorboard
# Ray's token authentication (Ray >= 2.52; ray/_private/authentication): every Ray process and client on this node
# (`ray start`, `ray job`, the rehearsal, the job's driver and workers) reads the run's token from this 0600 file,
# which `dapo-ops launch` writes and `stop` deletes; no environment holds the token itself.
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN_PATH=/var/lib/dapo-ops/runs/render/ray-token
unset RAY_USE_TLS
# No secret is in here or in any process Ray starts: the secrets the spec lists reach the job's workers as 0600
# files named in its runtime environment (NETRC, HF_TOKEN_PATH: dapo_ops/job/secrets.py).
ulimit -n 65536 2>/dev/null || true
