"""The controller's hashed locks (requirements/, made by scripts/lock-controller.sh, installed by
scripts/install-controller.sh with --require-hashes) stay in step with pyproject.toml and the manifest."""
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from dapo_ops.manifest import load_manifest
from dapo_ops.paths import PROJECT_ROOT

LOCKS = Path(PROJECT_ROOT, "requirements")
ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9][\w.-]*)==(?P<version>\S+)(?P<marker> ;[^\\]*)? \\\n"
                   r"(?P<hashes>(?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", re.M)


def read_lock(name, directory=LOCKS):
    text = Path(directory, name).read_text()
    entries = {}
    for match in ENTRY.finditer(text):
        entries.setdefault(canonicalize_name(match["name"]), set()).add(match["version"])
    requirement_lines = [line for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    assert len(requirement_lines) == sum(1 for _ in ENTRY.finditer(text)), f"{name}: an entry without sha256 hashes"
    return entries


@pytest.fixture(scope="module")
def pyproject():
    return tomllib.loads(Path(PROJECT_ROOT, "pyproject.toml").read_text())


@pytest.mark.parametrize("group", ["dependencies", "test"])
def test_every_requirement_of_pyproject_is_locked_inside_its_range(pyproject, group):
    lines = pyproject["project"]["dependencies"] if group == "dependencies" else \
        pyproject["project"]["optional-dependencies"][group]
    locked = read_lock("controller.txt")
    for line in lines:
        requirement = Requirement(line)
        versions = locked.get(canonicalize_name(requirement.name))
        assert versions, f"{requirement.name} is not in requirements/controller.txt: run scripts/lock-controller.sh"
        assert all(requirement.specifier.contains(v, prereleases=True) for v in versions), \
            f"{requirement.name} locked at {versions}, outside {requirement.specifier}: run scripts/lock-controller.sh"


def test_the_build_tools_satisfy_the_build_system_and_agree_with_the_controller_lock(pyproject):
    tools = read_lock("build-tools.txt")
    for line in pyproject["build-system"]["requires"]:
        requirement = Requirement(line)
        versions = tools.get(canonicalize_name(requirement.name))
        assert versions and all(requirement.specifier.contains(v) for v in versions), line
    assert {"pip", "setuptools", "wheel"} <= tools.keys()
    controller = read_lock("controller.txt")
    for name in tools.keys() & controller.keys():
        assert tools[name] == controller[name], f"{name}: {tools[name]} in build-tools.txt, {controller[name]} here"


def test_the_verl_lock_is_the_manifest_pin_alone():
    assert read_lock("verl-config.txt") == {"verl": {load_manifest().source("verl").version}}


def test_an_entry_without_hashes_is_caught(tmp_path):
    Path(tmp_path, "bad.txt").write_text("click==8.1.8 \\\n    --hash=sha256:" + "0" * 64 + "\nrich==14.0.0\n")
    with pytest.raises(AssertionError, match="without sha256"):
        read_lock("bad.txt", tmp_path)


def test_the_controller_install_is_the_python_part_alone_and_the_simulators_machine_runs_it():
    """A real controller runs scripts/install-controller.sh: no root, no system packages; scripts/bootstrap.sh adds
    the simulator's system packages and then runs it."""
    controller = (PROJECT_ROOT / "scripts" / "install-controller.sh").read_text()
    assert not re.search(r"\b(apt-get|apt|dnf|yum|sudo|dpkg)\b", controller)
    assert "--require-hashes" in controller and "-m venv .venv" in controller
    assert (PROJECT_ROOT / "scripts" / "bootstrap.sh").read_text().rstrip().endswith("exec bash scripts/install-controller.sh")
