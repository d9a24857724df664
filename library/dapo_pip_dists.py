#!/usr/bin/python
"""Installed distributions of a Python environment: version and, for editable installs, their source directory."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dapo_pip_dists
short_description: Report installed distributions (version, editable source directory) of a Python environment
description:
  - Runs the environment's interpreter once and reads importlib.metadata; changes nothing; supports check mode.
options:
  python:
    description: The environment's python executable.
    type: path
    required: true
  names:
    description: Distribution names to report (missing ones are returned as null).
    type: list
    elements: str
    required: true
author: dapo-ops
"""

RETURN = r"""
dists: {description: name -> {version, editable} or null, type: dict, returned: always}
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

PROBE = r"""
import importlib.metadata as m, json, sys
from urllib.parse import urlparse, unquote
out = {}
for name in sys.argv[1:]:
    try:
        dist = m.distribution(name)
    except m.PackageNotFoundError:
        out[name] = None
        continue
    editable = None
    raw = dist.read_text("direct_url.json")
    if raw:
        info = json.loads(raw)
        if info.get("dir_info", {}).get("editable"):
            editable = unquote(urlparse(info["url"]).path)
    if editable is None:
        base = str(dist.locate_file(""))
        if not base.rstrip("/").endswith(("site-packages", "dist-packages")):
            editable = base.rstrip("/")  # a legacy `setup.py develop` install: metadata in the checkout
    out[name] = {"version": dist.version, "editable": editable}
print(json.dumps(out))
"""


def main():
    module = AnsibleModule(
        argument_spec={"python": {"type": "path", "required": True},
                       "names": {"type": "list", "elements": "str", "required": True}},
        supports_check_mode=True,
    )
    python = module.params["python"]
    if not os.path.exists(python):
        module.exit_json(changed=False, env_exists=False, dists={n: None for n in module.params["names"]})
    rc, out, err = module.run_command([python, "-c", PROBE] + module.params["names"])
    if rc != 0:
        module.fail_json(msg="cannot read the environment's packages: %s" % (err or out).strip())
    module.exit_json(changed=False, env_exists=True, dists=json.loads(out))


if __name__ == "__main__":
    main()
