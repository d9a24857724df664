#!/usr/bin/env bash
# Rendered by dapo-ops for job qwen3-30b-a3b-dapo: submit the DAPO recipe to the Ray cluster, from the verl checkout.
# Run on the head node (a2-node01); the submission id comes from the caller (dapo-ops launch).
set -eo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
source "$here/env.sh"
set -u  # only after the environment: vendor set_env.sh scripts read unset variables
# Root's own commands (install, nft, pgrep, ss, timeout ...) come from the system's directories, not from whatever
# the sourced environment put first; Ray and the job get the environment's PATH back.
job_path=$PATH
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
submission_id=${DAPO_SUBMISSION_ID:?set DAPO_SUBMISSION_ID (dapo-ops launch does)}
# The token goes to the dashboard's port only when root's Ray dashboard holds it (dapo_ops/ray_listeners.py)
command -v ss >/dev/null || {
  echo "dapo-ops: ss (iproute2) is not installed on $(hostname): cannot check who holds the dashboard port" >&2
  exit 97; }
dapo_l=$(ss -Htlnpe "sport = :8265")
if [ -z "$dapo_l" ]; then
  echo "dapo-ops: nothing listens on the dashboard port 8265 on $(hostname)" >&2; exit 97
fi
if printf '%s\n' "$dapo_l" | grep -q ' uid:'; then
  echo "dapo-ops: the dashboard port 8265 on $(hostname) is held by a non-root socket:" \
    "$(printf '%s' "$dapo_l" | grep -o 'users:.*uid:[0-9]*')" >&2; exit 97
fi
dapo_p=$(printf '%s\n' "$dapo_l" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u) || true
if [ -z "$dapo_p" ]; then
  echo "dapo-ops: the dashboard port 8265 on $(hostname) is held by no visible process" >&2; exit 97
fi
for dapo_x in $dapo_p; do
  dapo_u=$(stat -c %u "/proc/$dapo_x" 2>/dev/null) || true
  dapo_c=$(tr '\0' ' ' <"/proc/$dapo_x/cmdline" 2>/dev/null | cut -c1-200) || true
  case "$dapo_u:$dapo_c" in
    "0:"*/ray/dashboard/dashboard.py*) ;;
    *) echo "dapo-ops: the dashboard port 8265 on $(hostname) is held by pid $dapo_x (uid $dapo_u: $dapo_c)," \
         "not root's Ray dashboard: the run's token was not sent" >&2; exit 97;;
  esac
done
exec env PATH="$job_path" /opt/miniconda3/envs/dapo/bin/ray job submit --address=http://127.0.0.1:8265 --submission-id="$submission_id" \
  --runtime-env="$here/runtime_env.yaml" --no-wait -- bash "$here/entrypoint.sh"
