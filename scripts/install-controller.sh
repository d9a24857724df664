#!/usr/bin/env bash
# The controller install: a virtualenv (.venv in this checkout) with dapo-ops, its pinned toolchain (ansible-core,
# Fabric, Hydra, ...) and verl's configuration for `dapo-ops validate`, from the hashed locks in requirements/. No
# root, no system packages: Python 3.11, 3.12 or 3.13 with its venv module (PYTHON=python3.13 picks another). The lock
# holds the test tools too (pytest, ansible-lint: a few MB), so one install serves both uses. dapo-ops runs
# from this checkout (it reads stack/, roles/ and jobs/ here), so it is installed editable. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
# The controller's toolchain comes from hashed locks (requirements/, made by scripts/lock-controller.sh): with
# --require-hashes pip checks each file's sha256 before it installs or builds anything. The build tools go in
# first, so the one source-only package (hydra's antlr4 runtime) and dapo-ops itself build with them, without an
# unhashed build environment from the index (--no-build-isolation).
stamp=.venv/.dapo-ops-installed
locks=(requirements/build-tools.txt requirements/controller.txt requirements/verl-config.txt)
stale=0
for input in pyproject.toml "${locks[@]}"; do
  [ -f "$stamp" ] && [ ! "$input" -nt "$stamp" ] || stale=1
done
if ((stale)); then
  pip=(.venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes)
  "${pip[@]}" -r requirements/build-tools.txt
  "${pip[@]}" --no-build-isolation -r requirements/controller.txt
  # verl's configuration for `dapo-ops validate`: the pinned verl wheel without its (NPU) dependencies; its lock
  # must name the manifest's pin
  verl_pin=$(.venv/bin/python -c 'import sys; sys.path.insert(0, "."); from dapo_ops.manifest import load_manifest
print(load_manifest().source("verl").version)')
  if ! grep -q "^verl==$verl_pin " requirements/verl-config.txt; then
    echo "bootstrap: requirements/verl-config.txt does not lock verl $verl_pin, the manifest's pin:" \
      "run scripts/lock-controller.sh" >&2
    exit 1
  fi
  "${pip[@]}" --no-deps -r requirements/verl-config.txt
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
  # every requirement met (dapo-ops' own included), but verl's, whose dependencies are left out on purpose
  broken=$(.venv/bin/python -m pip check 2>&1 | grep -v -e '^verl ' -e '^No broken requirements found' || true)
  if [ -n "$broken" ]; then echo "bootstrap: pip check: $broken" >&2; exit 1; fi
  touch "$stamp"
fi
echo "install-controller: ready ($(.venv/bin/dapo-ops --version))"
