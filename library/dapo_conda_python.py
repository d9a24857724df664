#!/usr/bin/python
"""The environment's Python is the one the pinned Miniconda installer carries: same build, same package digest.

The installer is pinned by sha256 (the manifest's, or the inventory's where it has none); its base environment
records the Python package it installed (PREFIX/conda-meta/python-<version>-<build>.json, with the package file's
sha256 and md5, as conda writes every installed record: conda 24.7.1 conda/core/prefix_data.py,
conda/models/records.py PrefixRecord). That record is the interpreter's pin, on every path: offline from the
installer's package cache, or from a channel mirror (`dapo_conda_channel`), which must serve that very file (a
mirror of the installer's channel, pkgs/main).
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dapo_conda_python
short_description: Pin an environment's Python to the one the pinned Miniconda installer carries
description:
  - Reads the installer's Python record in the base environment and returns the exact conda spec for it.
  - With I(env_prefix), also checks the environment's Python record against it (build, sha256, md5) and fails
    naming both when they differ.
  - Changes nothing; supports check mode.
options:
  conda_prefix:
    description: The Miniconda installation (its conda-meta holds the installer's records).
    type: path
    required: true
  python_version:
    description: The manifest's Python (X.Y); the installer's must be a release of it.
    type: str
  env_prefix:
    description: An environment to check against the installer's Python; omitted (or, in check mode, not made
      yet), nothing is checked.
    type: path
author: dapo-ops
"""

RETURN = r"""
spec: {description: the conda MatchSpec of the installer's Python (name==version=build), type: str, returned: success}
pinned: {description: the installer's Python record (dist, sha256, md5, channel), type: dict, returned: success}
"""

import glob
import json
import os

from ansible.module_utils.basic import AnsibleModule

DIGESTS = ("sha256", "md5")


class PinError(Exception):
    pass


def python_record(prefix: str) -> dict | None:
    """The python record in PREFIX/conda-meta (python-<version>-<build>.json); None when there is none."""
    found = []
    for path in sorted(glob.glob(os.path.join(prefix, "conda-meta", "python-*.json"))):
        try:
            with open(path) as f:
                record = json.load(f)
        except (OSError, ValueError) as exc:
            raise PinError(f"{path}: unreadable conda record ({exc})") from exc
        if isinstance(record, dict) and record.get("name") == "python":
            found.append(record)
    if len(found) > 1:
        raise PinError(f"{prefix}: more than one python record in conda-meta")
    return found[0] if found else None


def dist(record: dict) -> str:
    return f"python-{record.get('version')}-{record.get('build')}"


def pin_of(record: dict | None, conda_prefix: str) -> dict:
    if record is None:
        raise PinError(f"{conda_prefix}/conda-meta has no python record: not a Miniconda installation the role "
                       "installed; remove it and run the play again")
    digests = {key: record[key] for key in DIGESTS if isinstance(record.get(key), str) and record[key]}
    if not digests or not record.get("version") or not record.get("build"):
        raise PinError(f"{conda_prefix}/conda-meta/{dist(record)}.json records no package digest (sha256 or md5): "
                       "the interpreter cannot be pinned")
    return {"dist": dist(record), "version": record["version"], "build": record["build"],
            "channel": record.get("channel", ""), **digests}


def check_release(pinned: dict, wanted: str | None) -> None:
    """The installer's Python is a release of the manifest's X.Y (a py312 installer pinned for 3.11 is refused)."""
    if wanted and not (pinned["version"] == wanted or pinned["version"].startswith(wanted + ".")):
        raise PinError(f"the Miniconda installer carries Python {pinned['version']}, the stack manifest pins "
                       f"{wanted}: pin an installer built for it")


def mismatch(pinned: dict, record: dict | None, env_prefix: str) -> str | None:
    """Why the environment's Python is not the pinned one, or None when it is."""
    if record is None:
        return (f"{env_prefix} has no python record in conda-meta: it was not made by `conda create`; remove it and "
                "run the play again")
    if dist(record) != pinned["dist"]:
        return (f"{env_prefix} has {dist(record)} from {record.get('channel') or 'an unknown channel'}, not the "
                f"installer's {pinned['dist']}: the channel mirror must serve the installer's Python (mirror "
                f"{pinned['channel'] or 'its channel'}) or leave dapo_conda_channel unset; then remove the environment "
                f"(conda env remove -p {env_prefix}) and run the play again")
    for key in DIGESTS:
        if key in pinned and record.get(key) != pinned[key]:
            return (f"{env_prefix}: {pinned['dist']} has {key} {record.get(key) or 'none recorded'}, the installer's "
                    f"has {pinned[key]}: the channel mirror served another file under that name; remove the "
                    f"environment (conda env remove -p {env_prefix}) once the mirror is fixed")
    return None


def main():
    module = AnsibleModule(argument_spec={"conda_prefix": {"type": "path", "required": True},
                                         "python_version": {"type": "str"},
                                         "env_prefix": {"type": "path"}},
                           supports_check_mode=True)
    conda_prefix, env_prefix = module.params["conda_prefix"], module.params["env_prefix"]
    try:
        pinned = pin_of(python_record(conda_prefix), conda_prefix)
        check_release(pinned, module.params["python_version"])
        # in check mode the environment may not be made yet: nothing to check
        unmade = env_prefix and module.check_mode and not os.path.isdir(env_prefix)
        why = mismatch(pinned, python_record(env_prefix), env_prefix) if env_prefix and not unmade else None
    except PinError as exc:
        module.fail_json(msg=str(exc))
    if why:
        module.fail_json(msg=why, pinned=pinned)
    module.exit_json(changed=False, pinned=pinned, spec=f"python=={pinned['version']}={pinned['build']}")


if __name__ == "__main__":
    main()
