#!/usr/bin/env bash
# Install what dapo-ops and its simulated fleet need on a fresh Debian machine (root): system packages, then a
# virtualenv (.venv) with dapo-ops and its test tools. Idempotent; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# g++ make cmake libnuma-dev: the build tools preflight checks on the simulated nodes (which overlay this /usr);
# nftables: the firewall test's rules inside a node's network namespace; chromium: the report test opens
# report.html headless and takes a screenshot.
packages=(openssh-server openssh-client iproute2 util-linux git curl ca-certificates python3 python3-venv gcc g++ make
          cmake libnuma-dev nftables net-tools shellcheck chromium)
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
stamp=.venv/.dapo-ops-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
  # verl's configuration for `dapo-ops validate`: the pinned verl wheel without its (NPU) dependencies
  verl_pin=$(.venv/bin/python -c 'from dapo_ops.manifest import load_manifest; print(load_manifest().source("verl").version)')
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "verl==$verl_pin"
  touch "$stamp"
fi
echo "bootstrap: ready ($(.venv/bin/dapo-ops --version))"
