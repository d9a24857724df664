"""dapo_ops/model/variables.py declares every inventory variable once: dapo-ops' Python reads them through it (the
Ansible modules in library/ run on the nodes without dapo_ops and spell them, as the roles do), the
roles' and templates' variables are all declared, and docs/inventory-variables.md is generated from it."""

import importlib.util
import re
import subprocess
from pathlib import Path

from dapo_ops.model import variables
from dapo_ops.paths import PROJECT_ROOT

NAME = re.compile(r"\bdapo_[a-z0-9_]+\b")
# dapo_* words in the Ansible files that are not inventory variables: shell functions in templates, the project's
# own name, the example's key file
NOT_VARIABLES = {"dapo_dir", "dapo_refuse_open", "dapo_ops", "dapo_ops_ed25519"}


def tracked(*paths: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *paths], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    return [PROJECT_ROOT / p for p in out.stdout.split()]


def ansible_names() -> set[str]:
    """Filters (filter_plugins), lookups (lookup_plugins) and modules (library) spelled dapo_*: Ansible's names,
    not variables."""
    names = {p.stem for directory in ("library", "lookup_plugins") for p in (PROJECT_ROOT / directory).glob("*.py")}
    for path in (PROJECT_ROOT / "filter_plugins").glob("*.py"):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        names |= set(module.FilterModule().filters())
    return names


def test_the_reference_page_is_generated_from_the_declarations():
    assert (PROJECT_ROOT / "docs" / "inventory-variables.md").read_text() == variables.markdown(), \
        "run: python -m dapo_ops.model.variables > docs/inventory-variables.md"


def test_no_other_python_module_spells_a_variable():
    declared = re.compile(r"\b(" + "|".join(map(re.escape, variables.VARIABLES)) + r")\b")
    spelled = [f"{p.relative_to(PROJECT_ROOT)}:{n}: {m.group(0)}" for p in tracked("dapo_ops")
               if p.suffix == ".py" and p.name != "variables.py"
               for n, line in enumerate(p.read_text().splitlines(), 1) for m in [declared.search(line)] if m]
    assert not spelled, spelled


def test_every_variable_the_roles_and_templates_read_is_declared():
    files = tracked("roles", "playbooks", "templates", "inventory/example", "site.yml")
    used = {name for path in files if path.is_file() for name in NAME.findall(path.read_text(errors="replace"))}
    undeclared = sorted(used - set(variables.VARIABLES) - ansible_names() - NOT_VARIABLES)
    assert not undeclared, f"declare them in dapo_ops/model/variables.py: {undeclared}"


def test_every_declared_variable_is_read_somewhere():
    ansible_text = "".join(p.read_text(errors="replace") for p in tracked("roles", "playbooks", "templates")
                           if p.is_file())
    python_text = "".join(p.read_text() for p in tracked("dapo_ops") if p.suffix == ".py" and p.name != "variables.py")
    constants = {v.name: c for c, v in vars(variables).items() if isinstance(v, variables.Variable)}
    unread = [name for name, const in constants.items()
              if not re.search(rf"\b{name}\b", ansible_text) and not re.search(rf"\b{const}\b", python_text)]
    assert not unread, unread


def test_a_declaration_is_complete():
    for variable in variables.VARIABLES.values():
        assert variable.name.startswith("dapo_") and variable.kind and variable.default and variable.readers
        assert variable.doc.endswith(".") and "|" not in variable.doc, variable.name
