"""The version file parsers (driver, firmware, CANN toolkit, NNAL)."""

import pytest

from dapo_ops.ascend import version_files
from dapo_ops.errors import ParseError

from .mangle import mangled


def read(data_dir, name):
    return (data_dir / "ascend" / name).read_text()


def test_version_files(data_dir):
    driver = version_files.parse_version_info(read(data_dir, "driver-version.info"), "cat driver/version.info")
    assert driver["Version"] == "25.0.rc1.1"
    assert driver["compatible_version_fw"] == "[7.0.0,7.7.99]"
    firmware = version_files.parse_version_info(read(data_dir, "firmware-version.info"))
    assert firmware["compatible_version_drv"].endswith("[25.0,25.0.]")
    toolkit = version_files.parse_toolkit_install_info(read(data_dir, "ascend_toolkit_install.info"))
    assert (toolkit["version"], toolkit["innerversion"]) == ("8.3.RC1", "V100R001C23SPC001B235")
    nnal = version_files.parse_nnal_version_info("Ascend-cann-atb : 8.3.RC1\nAscend-cann-atb Version : 8.3.RC1.B235\n")
    assert nnal["Ascend-cann-atb"] == "8.3.RC1"


@pytest.mark.parametrize("text, reason", [
    ("", "empty or truncated"),
    ("Version 25.0.rc1.1\n", "expected 'key=value'"),
    ("=25\n", "empty key"),
    ("package_version=25.0.rc1.1\n", "missing Version="),
])
def test_version_info_malformed(text, reason):
    with pytest.raises(ParseError) as err:
        version_files.parse_version_info(text, "cat /usr/local/Ascend/driver/version.info")
    assert reason in str(err.value)
    assert "cat /usr/local/Ascend/driver/version.info" in str(err.value)


@pytest.mark.parametrize("parser, sample", [
    (version_files.parse_version_info, "driver-version.info"),
    (version_files.parse_toolkit_install_info, "ascend_toolkit_install.info"),
])
def test_truncated_and_mangled_input_only_ever_raises_parse_error(data_dir, parser, sample):
    """Every line-prefix and a few hundred seeded mutations: a result or a ParseError, nothing else."""
    for candidate in mangled(read(data_dir, sample), sample):
        try:
            parser(candidate)
        except ParseError:
            pass
