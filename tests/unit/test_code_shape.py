"""The shape issue 12 set for dapo_ops/ and dapo_sim/: small modules, no function above radon's grade C (cyclomatic complexity
20). The simulator's emulated tools and stand-in installers (dapo_sim/assets/) imitate vendor programs whole
and are left out."""

from pathlib import Path

from radon.complexity import cc_visit

from dapo_ops.paths import PROJECT_ROOT

PACKAGES = (PROJECT_ROOT / "dapo_ops", PROJECT_ROOT / "dapo_sim")
MAX_LINES = 320
MAX_COMPLEXITY = 20   # radon grade C ends at 20
# modules allowed to be longer, and why (each says so at its top too)
LONGER = {"dapo_ops/launch/rehearsal_driver.py": "one file shipped to the head: the rank actor and the phases driving it"}


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in package.rglob("*.py")
                  if "assets" not in p.relative_to(package).parts)


def test_no_module_is_long_without_a_reason():
    long = [f"{p.relative_to(PROJECT_ROOT)}: {len(p.read_text().splitlines())} lines" for p in modules()
            if len(p.read_text().splitlines()) > MAX_LINES and str(p.relative_to(PROJECT_ROOT)) not in LONGER]
    assert not long, long


def functions(blocks):
    """Every function, method and closure radon found, flattened."""
    for block in blocks:
        if hasattr(block, "methods"):   # a class: its methods are the functions
            yield from functions(block.methods)
            continue
        yield block
        yield from functions(getattr(block, "closures", []))


def test_no_function_is_above_grade_c():
    complex_ = [f"{p.relative_to(PROJECT_ROOT)}:{block.lineno} {block.name} ({block.complexity})" for p in modules()
                for block in functions(cc_visit(p.read_text())) if block.complexity > MAX_COMPLEXITY]
    assert not complex_, complex_
    assert sum(1 for p in modules() for _ in functions(cc_visit(p.read_text()))) > 500  # it did look
