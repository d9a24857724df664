"""CI's integration groups (tests/integration/groups.py): every integration module runs in exactly one group, the
modules sharing the provisioned fleet together, and a group's pytest closing line is counted as pytest wrote it."""

from pathlib import Path

from tests.integration import groups

INTEGRATION = Path(groups.__file__).parent


def test_every_module_is_in_exactly_one_group_and_the_site_fleet_modules_share_one():
    chosen = groups.groups()
    listed = [m for modules in chosen.values() for m in modules]
    assert sorted(listed) == sorted(p.name for p in INTEGRATION.glob("test_*.py"))
    assert len(listed) == len(set(listed))
    assert chosen["site-fleet"][:len(groups.SITE_FLEET_MODULES)] == list(groups.SITE_FLEET_MODULES)


def test_a_group_s_closing_line_is_counted():
    log = "tests/integration/test_audit.py ....F\n" \
          "========= 1 failed, 68 passed, 2 skipped, 1 error in 812.31s (0:13:32) =========\n"
    assert groups.counts(log) == {"failed": 1, "passed": 68, "skipped": 2, "error": 1}
    assert groups.counts("======= 6 passed, 63 deselected in 7.67s =======\n") == {"passed": 6}
    assert groups.counts("INTERNALERROR> Traceback\n") == {}   # no closing line: nothing counted as passed


def test_a_group_that_failed_without_a_failed_test_is_counted_as_a_failure(tmp_path, capsys):
    from types import SimpleNamespace

    log = tmp_path / "g.log"
    log.write_text("mount: /var/lib/dapo-ops: special device does not exist\n")
    group = SimpleNamespace(name="g", log=log, seconds=1.0, dir=tmp_path / "g", proc=SimpleNamespace(returncode=32))
    total = {}
    groups.report(group, total)
    assert total == {"failed": 1}
    assert "exited 32 without a failed test" in capsys.readouterr().out
    log.write_text("===== 3 passed in 2.00s =====\n")
    group.proc.returncode = 0
    groups.report(group, total)
    assert total == {"failed": 1, "passed": 3}
