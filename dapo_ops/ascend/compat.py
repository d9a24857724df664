"""Driver / firmware / CANN toolkit compatibility, decided from the real version-file contents.

The rules are the vendor's own data, as ascend-deployer and npu-smi read it:
- the driver's ``compatible_version_fw`` lists firmware ranges, e.g. ``[7.0.0,7.7.99]``;
- the firmware's ``compatible_version_drv`` lists driver ranges, e.g. ``[25.0,25.0.]`` where a trailing dot
  on the upper bound means "any version under that prefix";
- the toolkit's ``compatible_version`` lists driver ``Innerversion`` codes (``[V100R001C21]``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dapo_ops.model.variables import HDK_DOWNGRADE

_RANGE = re.compile(r"\[([^\[\],]*)(?:,([^\[\]]*))?\]")
_INNER_CODE = re.compile(r"^(V\d+R\d+C\d+)")


def _numeric_prefix(version: str) -> tuple[int, ...]:
    """Leading all-digit components: '24.1.rc3' -> (24, 1); '7.5.0.1.129' -> (7, 5, 0, 1, 129)."""
    parts: list[int] = []
    for token in version.strip().split("."):
        if not token.isdigit():
            break
        parts.append(int(token))
    return tuple(parts)


def _components(version: str) -> list[str]:
    return [p for p in version.strip().lower().split(".") if p != ""]


_RC = re.compile(r"rc(\d+)")


def release_order(version: str) -> tuple[tuple[int, int, str], ...]:
    """A sort key in the vendor's release order: numbers compare as numbers, and a release candidate comes before
    the release of the same prefix (24.1.rc3 < 24.1.0 < 25.0.rc1 < 25.0.rc1.2 < 25.0.0; 7.5.0.1.129 <
    7.6.0.1.220)."""
    key = []
    for token in _components(version):
        rc = _RC.fullmatch(token)
        key.append((2, int(token), "") if token.isdigit() else (1, int(rc.group(1)), "") if rc else (0, 0, token))
    return tuple(key)


def hdk_downgrades(installed: dict[str, str | None], pinned: dict[str, str], allowed: list[str]) -> list[str]:
    """What installing the pinned HDK would take back to an older version, for the components not in `allowed`."""
    return [f"the installed {component} {installed[component]} is newer than the pinned {pinned[component]}: "
            f"site.yml does not go back unless {HDK_DOWNGRADE} lists {component}"
            for component in ("driver", "firmware")
            if installed.get(component) and component not in allowed
            and release_order(str(installed[component])) > release_order(pinned[component])]


@dataclass(frozen=True)
class VersionRange:
    """One ``[low,high]`` entry of a compatible_version_* list."""

    low: str
    high: str

    def contains(self, version: str) -> bool:
        value = _numeric_prefix(version)
        low = _numeric_prefix(self.low)
        if value[: len(low)] < low:
            return False
        if self.high.endswith("."):
            prefix = _components(self.high)
            return _components(version)[: len(prefix)] == prefix
        high = _numeric_prefix(self.high)
        return value[: len(high)] <= high

    def __str__(self) -> str:
        return f"[{self.low},{self.high}]"


def parse_ranges(text: str) -> list[VersionRange]:
    """Parse ``[a,b],[c,d]`` (a single ``[a]`` means exactly a). Raises ValueError on junk."""
    text = text.strip()
    if not text:
        raise ValueError("empty range list")
    ranges: list[VersionRange] = []
    pos = 0
    for match in _RANGE.finditer(text):
        gap = text[pos : match.start()].strip().strip(",").strip()
        if gap:
            raise ValueError(f"unexpected text {gap!r} in range list")
        low = match.group(1).strip()
        high = (match.group(2) if match.group(2) is not None else match.group(1)).strip()
        if not low:
            raise ValueError("empty lower bound in range list")
        ranges.append(VersionRange(low, high))
        pos = match.end()
    if not ranges or text[pos:].strip().strip(","):
        raise ValueError(f"malformed range list {text!r}")
    return ranges


def parse_code_list(text: str) -> list[str]:
    """Parse ``[V100R001C17],[V100R001C18]`` into codes."""
    codes = [r.low for r in parse_ranges(text)]
    return codes


def inner_code(innerversion: str) -> str:
    """'V100R001C21SPC002B220' -> 'V100R001C21'."""
    match = _INNER_CODE.match(innerversion.strip())
    if not match:
        raise ValueError(f"not an Innerversion: {innerversion!r}")
    return match.group(1)


@dataclass(frozen=True)
class Problem:
    rule: str
    message: str


@dataclass(frozen=True)
class CompatibilityReport:
    problems: tuple[Problem, ...] = field(default_factory=tuple)
    checked: tuple[str, ...] = field(default_factory=tuple)

    @property
    def compatible(self) -> bool:
        return not self.problems

    def reasons(self) -> list[str]:
        return [p.message for p in self.problems]


def _field(info: dict[str, str], key: str, what: str, problems: list[Problem], rule: str) -> str | None:
    value = info.get(key)
    if value is None or not str(value).strip():
        problems.append(Problem(rule, f"{what} has no {key}"))
        return None
    return str(value).strip()


def _range_rule(rule: str, subject: dict[str, str], subject_name: str, owner: dict[str, str], owner_name: str,
                key: str, problems: list[Problem]) -> None:
    """subject's Version must lie in one of owner's `key` ranges (e.g. the firmware in the driver's range)."""
    version = _field(subject, "Version", f"{subject_name} version.info", problems, rule)
    ranges_text = _field(owner, key, f"{owner_name} version.info", problems, rule)
    if not (version and ranges_text):
        return
    try:
        ranges = parse_ranges(ranges_text)
    except ValueError as exc:
        problems.append(Problem(rule, f"{owner_name} {key} unreadable: {exc}"))
        return
    if not any(r.contains(version) for r in ranges):
        problems.append(Problem(rule, f"{subject_name} {version} is outside the {owner_name} "
                                      f"{owner.get('Version', '?')}'s {key} {ranges_text}"))


def check_compatibility(
    driver: dict[str, str] | None,
    firmware: dict[str, str] | None,
    toolkit: dict[str, str] | None = None,
) -> CompatibilityReport:
    """Is this driver / firmware (/ toolkit) combination compatible, and if not, why.

    Arguments are parsed version files (driver/firmware ``version.info``, ``ascend_toolkit_install.info``);
    ``None`` means "not installed" and skips the rules that need it.
    """
    problems: list[Problem] = []
    checked: list[str] = []

    if driver is not None and firmware is not None:
        for rule, subject, subject_name, owner, owner_name, key in (
                ("firmware-in-driver-range", firmware, "firmware", driver, "driver", "compatible_version_fw"),
                ("driver-in-firmware-range", driver, "driver", firmware, "firmware", "compatible_version_drv")):
            checked.append(rule)
            _range_rule(rule, subject, subject_name, owner, owner_name, key, problems)

    if driver is not None and toolkit is not None:
        rule = "toolkit-accepts-driver"
        checked.append(rule)
        inner = _field(driver, "Innerversion", "driver version.info", problems, rule)
        codes_text = _field(toolkit, "compatible_version", "ascend_toolkit_install.info", problems, rule)
        if inner and codes_text:
            try:
                code = inner_code(inner)
                codes = parse_code_list(codes_text)
            except ValueError as exc:
                problems.append(Problem(rule, f"toolkit/driver version data unreadable: {exc}"))
            else:
                if code not in codes:
                    problems.append(Problem(rule, (
                        f"CANN toolkit {toolkit.get('version', '?')} does not support driver "
                        f"{driver.get('Version', '?')} ({code} not in compatible_version {codes_text})")))

    return CompatibilityReport(tuple(problems), tuple(checked))
