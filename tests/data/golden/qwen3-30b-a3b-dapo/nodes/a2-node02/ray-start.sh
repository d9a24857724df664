#!/usr/bin/env bash
# Rendered by dapo-ops for job qwen3-30b-a3b-dapo: join a2-node02 to the Ray head on a2-node01.
set -eo pipefail
# shellcheck source=/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
set -u  # only after the environment: vendor set_env.sh scripts read unset variables
/opt/miniconda3/envs/dapo/bin/ray stop --force >/dev/null 2>&1 || true
# `ray start` against a head that is not there hangs: bound it.
exec timeout 120 /opt/miniconda3/envs/dapo/bin/ray start --address=192.0.2.11:6379 \
  --node-ip-address=192.0.2.12 --resources='{"NPU": 16}' --disable-usage-stats
