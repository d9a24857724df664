#!/usr/bin/env bash
# Rendered by dapo-ops for job qwen3-30b-a3b-dapo: submit the DAPO recipe to the Ray cluster, from the verl checkout.
# Run on the head node (a2-node01); the submission id comes from the caller (dapo-ops launch).
set -eo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
source "$here/env.sh"
set -u  # only after the environment: vendor set_env.sh scripts read unset variables
submission_id=${DAPO_SUBMISSION_ID:?set DAPO_SUBMISSION_ID (dapo-ops launch does)}
exec /opt/miniconda3/envs/dapo/bin/ray job submit --address=http://127.0.0.1:8265 --submission-id="$submission_id" \
  --runtime-env="$here/runtime_env.yaml" --no-wait -- bash "$here/entrypoint.sh"
