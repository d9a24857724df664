"""The `stack` variable every role reads: lookup_plugins/dapo_stack_manifest.py, the stack manifest parsed and
checked by dapo_ops.manifest's parser (the one the dapo-ops commands use)."""

import pytest
from ansible.errors import AnsibleLookupError

from dapo_ops.paths import STACK_MANIFEST
from lookup_plugins.dapo_stack_manifest import LookupModule


def lookup(path):
    return LookupModule().run([str(path)])[0]


def test_the_shipped_manifest_is_the_stack_variable():
    stack = lookup(STACK_MANIFEST)
    assert stack["schema"] == 1 and "driver" in stack["artifacts"] and "dkms" in stack["os_packages"]
    assert lookup(STACK_MANIFEST) is stack          # parsed once per process and file version


@pytest.mark.parametrize("text, needle", [
    ("schema: 2\n", "unsupported schema 2 (expected 1)"),
    ("schema: 1\nartifacts: [\n", "is not valid YAML"),
    ("- a list\n", "top level must be a mapping"),
])
def test_a_file_that_is_not_a_manifest_is_named_with_the_reason(tmp_path, text, needle):
    site_copy = tmp_path / "manifest.yml"
    site_copy.write_text(text)
    with pytest.raises(AnsibleLookupError) as raised:
        lookup(site_copy)
    assert needle in str(raised.value) and str(site_copy) in str(raised.value)


def test_a_missing_file_is_named():
    with pytest.raises(AnsibleLookupError, match="cannot read stack manifest /nonexistent/m.yml: No such file"):
        lookup("/nonexistent/m.yml")
