"""dapo_ops/job/memo.py: a composed configuration is remembered until a file under the config directories changes."""
import os

import pytest

from dapo_ops.job.memo import Memo, fingerprint
from dapo_ops.job.spec import SpecError


def test_a_result_is_computed_once_and_handed_out_as_a_copy():
    calls = []
    memo = Memo()
    first = memo.get("k", lambda: calls.append(1) or {"a": [1]})
    first["a"].append(2)
    assert memo.get("k", lambda: calls.append(1) or {"a": [1]}) == {"a": [1]} and calls == [1]


def test_an_error_is_remembered_as_the_same_error():
    memo = Memo()

    def bad():
        raise SpecError("override 'x': not a key")
    for _ in range(2):
        with pytest.raises(SpecError, match="override 'x': not a key"):
            memo.get("k", bad)


def test_the_least_recently_used_result_goes_first():
    memo = Memo(size=2)
    memo.get("a", lambda: 1)
    memo.get("b", lambda: 2)
    memo.get("a", lambda: 1)
    memo.get("c", lambda: 3)
    assert memo.get("a", lambda: "again") == 1 and memo.get("b", lambda: "again") == "again"


def test_an_edited_or_added_file_changes_the_fingerprint(tmp_path):
    (tmp_path / "group").mkdir()
    config = tmp_path / "group" / "a.yaml"
    config.write_text("x: 1\n")
    before = fingerprint(tmp_path)
    assert fingerprint(tmp_path) == before
    config.write_text("x: 22\n")
    os.utime(config, ns=(1, 1))
    assert fingerprint(tmp_path) != before
    edited = fingerprint(tmp_path)
    (tmp_path / "b.yaml").write_text("y: 1\n")
    assert fingerprint(tmp_path) != edited
