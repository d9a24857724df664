import pytest

from dapo_ops.ascend import compat
from dapo_ops.ascend.version_files import parse_toolkit_install_info, parse_version_info
from dapo_ops.paths import PROJECT_ROOT

ASCEND = PROJECT_ROOT / "tests" / "data" / "ascend"


@pytest.fixture
def pinned(data_dir):
    read = lambda name: (data_dir / "ascend" / name).read_text()  # noqa: E731
    return (parse_version_info(read("driver-version.info")), parse_version_info(read("firmware-version.info")),
            parse_toolkit_install_info(read("ascend_toolkit_install.info")))


def catalog_driver(version):
    """A driver's version.info as the vendor's installer writes it (tests/data/ascend, from the public report)."""
    return parse_version_info((ASCEND / f"driver-{version}-version.info").read_text())


def catalog_firmware(version):
    return parse_version_info((ASCEND / f"firmware-{version}-version.info").read_text())


def test_matched_triple_is_compatible(pinned):
    report = compat.check_compatibility(*pinned)
    assert report.compatible, report.reasons()
    assert report.checked == ("firmware-in-driver-range", "driver-in-firmware-range", "toolkit-accepts-driver")


def test_firmware_outside_driver_range():
    # the public report: driver 24.1.rc2 ([7.0.0,7.2.99]) with firmware 7.3.0.1.231
    report = compat.check_compatibility(catalog_driver("24.1.rc2"), catalog_firmware("7.3.0.1.231"))
    assert not report.compatible
    assert [p.rule for p in report.problems] == ["firmware-in-driver-range"]
    assert "7.3.0.1.231 is outside the driver 24.1.rc2's compatible_version_fw [7.0.0,7.2.99]" in report.reasons()[0]


def test_new_driver_on_old_firmware_is_refused_by_the_firmware(pinned):
    driver, _, _ = pinned
    report = compat.check_compatibility(driver, catalog_firmware("7.5.0.1.129"))
    assert [p.rule for p in report.problems] == ["driver-in-firmware-range"]
    assert "driver 25.0.rc1.1 is outside the firmware 7.5.0.1.129" in report.reasons()[0]


def test_toolkit_rejects_an_old_driver(pinned):
    _, firmware, toolkit = pinned
    report = compat.check_compatibility(catalog_driver("24.1.rc2"), None, toolkit)
    assert report.compatible  # C18 is listed by the 8.3.RC1 toolkit
    old_toolkit = dict(toolkit, compatible_version="[V100R001C21],[V100R001C23]")
    report = compat.check_compatibility(catalog_driver("24.1.rc2"), None, old_toolkit)
    assert [p.rule for p in report.problems] == ["toolkit-accepts-driver"]
    assert "V100R001C18 not in compatible_version" in report.reasons()[0]


def test_missing_components_skip_their_rules(pinned):
    driver, _, toolkit = pinned
    assert compat.check_compatibility(None, None, None).checked == ()
    assert compat.check_compatibility(driver, None, toolkit).checked == ("toolkit-accepts-driver",)


def test_missing_and_unreadable_fields_are_problems_not_crashes(pinned):
    driver, firmware, toolkit = pinned
    broken = dict(driver, compatible_version_fw="7.0.0-7.7.99")
    report = compat.check_compatibility(broken, firmware, toolkit)
    assert "unreadable" in report.reasons()[0]
    no_inner = {k: v for k, v in driver.items() if k != "Innerversion"}
    report = compat.check_compatibility(no_inner, firmware, toolkit)
    assert any("has no Innerversion" in r for r in report.reasons())


@pytest.mark.parametrize("ranges, version, inside", [
    ("[7.0.0,7.7.99]", "7.7.0.1.231", True),
    ("[7.0.0,7.7.99]", "7.8.0.6.236", False),
    ("[7.0.0,7.7.99]", "6.4.0.1.1", False),
    ("[6.4.0,6.4.99],[7.0.0,7.7.99]", "6.4.0.3.220", True),
    ("[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.],[25.0,25.0.]", "25.0.rc1.1", True),
    ("[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.],[25.0,25.0.]", "24.1.rc3", True),
    ("[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.]", "25.0.rc1.1", False),
    ("[23.0.0,23.0.0.]", "23.0.0", True),
    ("[23.0.0,23.0.0.]", "23.0.1", False),
])
def test_version_ranges(ranges, version, inside):
    assert any(r.contains(version) for r in compat.parse_ranges(ranges)) is inside


@pytest.mark.parametrize("text", ["", "7.0.0,7.7.99", "[7.0.0,7.7.99] junk", "[,7.7]"])
def test_malformed_ranges(text):
    with pytest.raises(ValueError):
        compat.parse_ranges(text)


def test_inner_code():
    assert compat.inner_code("V100R001C21SPC002B220") == "V100R001C21"
    with pytest.raises(ValueError):
        compat.inner_code("25.0.rc1.1")


def test_the_vendors_release_order():
    from dapo_ops.ascend.compat import release_order

    ordered = ["23.0.rc3", "24.1.rc2", "24.1.rc3", "24.1.0", "25.0.rc1", "25.0.rc1.1", "25.0.RC2", "25.0.0", "25.2.0"]
    assert sorted(reversed(ordered), key=release_order) == ordered
    assert release_order("7.5.0.1.129") < release_order("7.7.0.1.231") < release_order("7.7.0.2.1")


def test_going_back_to_an_older_hdk_is_refused_unless_named():
    from dapo_ops.ascend.compat import hdk_downgrades

    pinned = {"driver": "25.0.rc1.1", "firmware": "7.7.0.1.231"}
    assert hdk_downgrades({"driver": "24.1.rc3", "firmware": None}, pinned, []) == []   # an upgrade, a fresh node
    assert hdk_downgrades(dict(pinned), pinned, []) == []
    newer = {"driver": "25.2.0", "firmware": "7.8.0.2.212"}
    assert hdk_downgrades(newer, pinned, []) == [
        "the installed driver 25.2.0 is newer than the pinned 25.0.rc1.1: site.yml does not go back unless "
        "dapo_hdk_downgrade lists driver",
        "the installed firmware 7.8.0.2.212 is newer than the pinned 7.7.0.1.231: site.yml does not go back unless "
        "dapo_hdk_downgrade lists firmware"]
    assert [p.split()[2] for p in hdk_downgrades(newer, pinned, ["driver"])] == ["firmware"]
