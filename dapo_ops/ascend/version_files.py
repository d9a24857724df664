"""Parsers of the version files the Ascend packages install (driver, firmware, CANN toolkit, kernels, NNAL).

Each takes the file's text and the command it came from (for the error) and returns its keys; malformed, truncated
or incomplete files raise ``ParseError``. Driver, firmware and kernels files are ``key=value`` lines
(``Version=...``), the toolkit's ``ascend_toolkit_install.info`` too (``version=...``), NNAL's ``version.info`` is
``key : value`` lines (``Ascend-cann-atb : ...``); samples under tests/data/ascend/.
"""

from __future__ import annotations

from dapo_ops.ascend.where import Where


def _key_values(text: str, where: Where, separator: str = "=") -> dict[str, str]:
    """``key=value`` lines (version.info, ascend_toolkit_install.info); ``key : value`` with separator ':'."""
    result: dict[str, str] = {}
    for line_no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if separator not in stripped:
            where.at(line_no, line).fail(f"expected 'key{separator}value'")
        key, value = stripped.split(separator, 1)
        key = key.strip()
        if not key:
            where.at(line_no, line).fail("empty key")
        result[key] = value.strip()
    if not result:
        where.fail("no key/value lines (empty or truncated file)")
    return result


def parse_version_info(text: str, command: str = "cat version.info", required: tuple[str, ...] = ("Version",)) -> dict[str, str]:
    """Driver or firmware ``version.info``."""
    where = Where(command)
    info = _key_values(text, where)
    for key in required:
        if key not in info or not info[key]:
            where.fail(f"missing {key}=")
    return info


def parse_toolkit_install_info(text: str, command: str = "cat ascend_toolkit_install.info") -> dict[str, str]:
    """CANN ``ascend_toolkit_install.info``."""
    return parse_version_info(text, command, required=("version", "innerversion"))


def parse_nnal_version_info(text: str, command: str = "cat nnal/atb/latest/version.info") -> dict[str, str]:
    """NNAL ``version.info`` (``Ascend-cann-atb : <version>`` lines)."""
    where = Where(command)
    info = _key_values(text, where, separator=":")
    if "Ascend-cann-atb" not in info:
        where.fail("missing 'Ascend-cann-atb :' line")
    return info
