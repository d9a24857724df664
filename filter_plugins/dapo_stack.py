"""The installed version of a manifest artifact, read from its raw version file the way the audit reads it: the
audit fact's parser for that file, then the key the manifest names (artifacts.<key>.version_key)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from dapo_ops.audit.analyze import FACT_OF
from dapo_ops.audit.fact import all_facts
from dapo_ops.errors import ParseError


def installed_version(text, artifacts, key):
    """`raw | dapo_installed_version(stack.artifacts, 'driver')`: the version string, or None when not installed."""
    if text is None:
        return None
    if key not in FACT_OF or key not in artifacts:
        raise AnsibleFilterError(f"dapo_installed_version: no version file is read for artifact {key!r}")
    try:
        parsed = all_facts()[FACT_OF[key]].parse(text)
    except ParseError as exc:
        raise AnsibleFilterError(str(exc)) from None
    version_key = artifacts[key].get("version_key")
    if not version_key:
        raise AnsibleFilterError(f"the stack manifest's artifacts.{key} has no version_key")
    value = (parsed or {}).get(version_key)
    return None if value is None else str(value)


class FilterModule:
    def filters(self):
        return {"dapo_installed_version": installed_version}
