"""`lookup('dapo_stack_manifest', PATH)`: the stack manifest as the `stack` variable every role reads (the stack
role's defaults), checked with dapo_ops.manifest's parser, which the dapo-ops commands use too.

A role default rather than an include_vars task in every play: no task per play and host to load it (each costs
Ansible a worker fork, about a quarter of a second here). Parsed once per process and file version: Ansible
templates `stack` wherever a task names it.
"""

from __future__ import annotations

import os

import yaml
from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from dapo_ops.errors import ManifestError
from dapo_ops.manifest import parse_manifest

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_PARSED: dict[tuple[str, int, int], dict] = {}


def read_manifest(path: str) -> dict:
    """The manifest's data at path (ManifestError naming the file when it cannot be read or is not a manifest)."""
    try:
        status = os.stat(path)
        key = (path, status.st_mtime_ns, status.st_size)
        if key not in _PARSED:
            with open(path) as handle:
                data = yaml.load(handle, Loader=_LOADER)
            parse_manifest(data, path)
            _PARSED[key] = data
    except OSError as exc:
        raise ManifestError(f"cannot read stack manifest {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"stack manifest {path} is not valid YAML: {exc}") from None
    return _PARSED[key]


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if len(terms) != 1:
            raise AnsibleLookupError("dapo_stack_manifest takes one path, the stack manifest's (stack_manifest)")
        try:
            return [read_manifest(os.path.expanduser(str(terms[0])))]
        except ManifestError as exc:
            raise AnsibleLookupError(str(exc)) from None
