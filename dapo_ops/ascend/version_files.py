"""Parsers of the version files the Ascend packages install (driver, firmware, CANN toolkit, kernels, NNAL).

Each takes the file's text and the command it came from (for the error) and returns its keys; malformed, truncated
or incomplete files raise ``ParseError``. Driver, firmware and kernels files are ``key=value`` lines
(``Version=25.0.rc1.1``), the toolkit's ``ascend_toolkit_install.info`` too (``version=8.3.RC1``), NNAL's
``version.info`` is ``key : value`` lines (``Ascend-cann-atb : 8.3.RC1``); samples under tests/data/ascend/.
"""

from __future__ import annotations

from dapo_ops.errors import ParseError


def parse_key_values(text: str, command: str, separator: str = "=") -> dict[str, str]:
    """``key=value`` lines (version.info, ascend_toolkit_install.info); ``key : value`` with separator ':'."""
    result: dict[str, str] = {}
    for line_no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if separator not in stripped:
            raise ParseError(command, f"expected 'key{separator}value'", line_no, line)
        key, value = stripped.split(separator, 1)
        key = key.strip()
        if not key:
            raise ParseError(command, "empty key", line_no, line)
        result[key] = value.strip()
    if not result:
        raise ParseError(command, "no key/value lines (empty or truncated file)")
    return result


def parse_version_info(text: str, command: str = "cat version.info", required: tuple[str, ...] = ("Version",)) -> dict[str, str]:
    """Driver or firmware ``version.info``."""
    info = parse_key_values(text, command)
    for key in required:
        if key not in info or not info[key]:
            raise ParseError(command, f"missing {key}=")
    return info


def parse_toolkit_install_info(text: str, command: str = "cat ascend_toolkit_install.info") -> dict[str, str]:
    """CANN ``ascend_toolkit_install.info``."""
    return parse_version_info(text, command, required=("version", "innerversion"))


def parse_nnal_version_info(text: str, command: str = "cat nnal/atb/latest/version.info") -> dict[str, str]:
    """NNAL ``version.info`` (``Ascend-cann-atb : <version>`` lines)."""
    info = parse_key_values(text, command, separator=":")
    if "Ascend-cann-atb" not in info:
        raise ParseError(command, "missing 'Ascend-cann-atb :' line")
    return info
