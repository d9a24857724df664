"""The failure matrix (docs/failure-matrix.md, moved out of the README; issue 14): every row F1-F20 is there, and
every test it names exists."""

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]


def matrix_rows() -> dict[str, str]:
    text = (ROOT / "docs" / "failure-matrix.md").read_text()
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| (F\d+) \|.*$", text, re.MULTILINE)}


def named_tests(row: str) -> list[tuple[str, str]]:
    """(file, test name or prefix ending in …) for each `file.py::name` / `::name` in the row's last column."""
    found, current = [], None
    for ref in re.findall(r"`([\w/]*\.py)?::([\w…]+)`", row.rsplit("|", 2)[-2]):
        current = ref[0] or current
        found.append((current, ref[1]))
    return found


def test_every_failure_class_has_a_row_naming_tests():
    rows = matrix_rows()
    assert sorted(rows, key=lambda f: int(f[1:])) == [f"F{n}" for n in range(1, 21)]
    for number, row in rows.items():
        if "the same" not in row.rsplit("|", 2)[-2]:
            assert named_tests(row), number


def test_every_test_the_matrix_names_exists():
    checked = 0
    for number, row in matrix_rows().items():
        for file, name in named_tests(row):
            folder = next(f for f in ("unit", "local", "sim", "integration") if (ROOT / "tests" / f / file).exists())
            source = (ROOT / "tests" / folder / file).read_text()
            pattern = rf"^def {re.escape(name.rstrip('…'))}" + (r"\w*\(" if name.endswith("…") else r"\(")
            assert re.search(pattern, source, re.MULTILINE), f"{number}: {file}::{name}"
            checked += 1
    assert checked >= 25
