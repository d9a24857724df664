"""A run remembers the inventory it was launched with; the commands about it read that one unless -i says another
(dapo_ops/launch/records.py run_inventory)."""
import json
from pathlib import Path

import pytest

from dapo_ops.errors import UsageError
from dapo_ops.launch import records


def _record(tmp_path, **extra):
    return records.RunRecord(run_id="r1", job="j", nodes=["n1"], head="n1", head_address="10.0.0.1",
                             dashboard="http://127.0.0.1:8265", node_dir="/var/lib/dapo-ops/runs/r1", **extra)


def test_the_launch_inventory_is_used_unless_i_names_another(tmp_path):
    site = tmp_path / "site-inventory"
    site.mkdir()
    record = _record(tmp_path, inventory=str(site))
    assert records.run_inventory(record, None) == site
    assert records.run_inventory(record, "other/inv") == Path("other/inv")


def test_a_record_from_before_has_none_and_the_configured_one_applies(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "RUNS_DIR", tmp_path)
    (tmp_path / "r1").mkdir()
    saved = _record(tmp_path)
    saved.save()
    data = json.loads((tmp_path / "r1" / "run.json").read_text())
    del data["inventory"]                               # as an older dapo-ops wrote it
    (tmp_path / "r1" / "run.json").write_text(json.dumps(data))
    assert records.run_inventory(records.load_run("r1"), None) is None


def test_a_launch_inventory_that_is_gone_says_to_pass_i(tmp_path):
    record = _record(tmp_path, inventory=str(tmp_path / "moved"))
    with pytest.raises(UsageError, match=r"^run r1 was launched with the inventory .*/moved, which is not there "
                                         r"any more: pass -i INVENTORY$"):
        records.run_inventory(record, None)
