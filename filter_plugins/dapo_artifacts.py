"""The artifact role's digests: the site's digest file (dapo_artifact_digest_file), read on the controller by
dapo_ops.stack.artifacts, as the inventory checks read it."""

from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError

from dapo_ops.errors import UsageError
from dapo_ops.stack.artifacts import read_digest_file


def recorded_digests(digest_file, artifacts) -> dict:
    """`dapo_artifact_digest_file | dapo_recorded_digests(stack.artifacts)`: artifact key -> the sha256 the file
    records for its file name ({} without a file)."""
    if not digest_file:
        return {}
    try:
        recorded = read_digest_file(os.path.expanduser(str(digest_file)))
    except UsageError as exc:
        raise AnsibleFilterError(f"dapo_artifact_digest_file: {exc}") from None
    return {key: recorded[item["file"]] for key, item in artifacts.items() if item["file"] in recorded}


def source_bundle(source) -> str:
    """`stack.sources[key] | dapo_source_bundle`: its git bundle's file name (dapo_ops.stack.artifacts.bundle_name)."""
    from dapo_ops.stack.artifacts import bundle_name

    return bundle_name(str(source["repo"]), str(source["ref"]))


class FilterModule:
    def filters(self):
        return {"dapo_recorded_digests": recorded_digests, "dapo_source_bundle": source_bundle}
