#!/usr/bin/python
"""Install into a Python environment from the stack lock only: every package at its locked version, hash-checked."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dapo_pip_locked
short_description: Install requirements (and an editable source checkout) from a hashed lock, and nothing else
description:
  - Plans with pip itself (C(pip install --dry-run --report) with the lock as constraints), refuses the whole
    install, naming them, when the plan holds a package the lock does not pin or a version other than the locked
    one, then installs exactly the planned packages from the lock's lines with C(--require-hashes --no-deps).
  - An editable checkout is installed last with C(--no-deps --no-build-isolation): its dependencies and the build
    requirements of its pyproject.toml come from the lock in the step before (pip's hash-checking mode has no
    hash for a directory, so the checkout itself is the one thing not hash-checked).
  - Nothing from the index builds or runs before its hash is checked. The plan and the install take wheels only
    (C(--only-binary=:all:)), whose metadata pip reads without running anything; the lock's source-only packages
    (I(source_only): no wheel exists) are first downloaded with C(--require-hashes) (pip checks the hash before it
    prepares the sdist's metadata), then planned and installed from that checked file. No build runs in an isolated
    environment (C(--no-build-isolation)): the build backend is the environment's, installed from the lock before.
  - Check mode plans and reports what would change without installing.
options:
  python:
    description: The environment's python executable (pip runs as C(python -m pip)).
    type: path
    required: true
  lock:
    description: The hashed lock on the node (C(name==version) lines, each followed by C(--hash=sha256:...)).
    type: path
    required: true
  requirements:
    description: Requirement specifiers to install (versions come from the lock).
    type: list
    elements: str
    default: []
  requirement_files:
    description: Requirements files to install (pip C(-r)).
    type: list
    elements: path
    default: []
  editable:
    description: A source checkout to install editable, after its dependencies.
    type: path
  build_requirements:
    description: Install the checkout's C([build-system] requires), with their bounds, from the lock before it
      (needs I(editable)); the lock is resolved with them (stack/lock/<source>-pyproject.in).
    type: bool
    default: true
  build_requirements_exclude:
    description: Build requirements not installed from the lock (the checkout builds against what the env has).
    type: list
    elements: str
    default: []
  skip:
    description: Distributions never installed, even when the plan holds them (a dependency asks for a package the
      recipe removes, such as the CUDA triton that shadows triton-ascend); they are reported in I(left_out).
    type: list
    elements: str
    default: []
  compile:
    description: Byte-compile the installed modules (pip's default); false passes C(--no-compile), and Python
      compiles each module on its first import instead.
    type: bool
    default: true
  source_only:
    description: Distributions the lock pins that have no wheel (only an sdist); they alone may be built, from a
      hash-checked download.
    type: list
    elements: str
    default: []
  reinstall_editable:
    description: Reinstall the checkout even when it is installed editable from I(editable) already.
    type: bool
    default: false
author: dapo-ops
"""

RETURN = r"""
installed: {description: name==version of each package installed from the lock, type: list, returned: always}
left_out: {description: names the plan held that I(skip) kept out (not `skipped`, which Ansible reads as a skipped task), type: list, returned: always}
editable_installed: {description: whether the checkout was (or in check mode would be) installed, type: bool,
                     returned: always}
"""

import json
import os
import re
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

HASH = re.compile(r"--hash[=\s]sha256:([0-9a-fA-F]{64})")

BUILD_REQUIRES = r"""
import json, sys, tomllib
with open(sys.argv[1], "rb") as f:
    print(json.dumps(tomllib.load(f).get("build-system", {}).get("requires", [])))
"""

EDITABLE_FROM = r"""
import importlib.metadata as m, json, sys
from urllib.parse import unquote, urlparse
try:
    raw = m.distribution(sys.argv[1]).read_text("direct_url.json") or "{}"
except m.PackageNotFoundError:
    raw = "{}"
info = json.loads(raw)
print(unquote(urlparse(info["url"]).path) if info.get("dir_info", {}).get("editable") else "")
"""


INSTALLED_VERSIONS = r"""
import importlib.metadata as m, json, sys
found = {}
for name in sys.argv[1:]:
    try:
        found[name] = m.version(name)
    except m.PackageNotFoundError:
        pass
print(json.dumps(found))
"""


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text):
    """name -> {version, line, hashes} for each `name==version ... --hash=...` entry (the pip requirements-file form).

    The module runs on the node, where dapo_ops is not installed; tests/local/test_pip_locked.py checks that this
    reads the real lock exactly as dapo_ops.stack.lock.parse_lock (the controller's strict parser) does."""
    entries, buf = {}, []
    for raw in text.splitlines() + [""]:
        line = re.split(r"(?:^|\s)#", raw, maxsplit=1)[0].rstrip()
        if line.endswith("\\"):
            buf.append(line[:-1].strip())
            continue
        buf.append(line.strip())
        joined = " ".join(part for part in buf if part)
        buf = []
        if not joined or joined.startswith("-"):
            continue
        requirement = joined.split(" --", 1)[0].split(";", 1)[0].strip()
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*===?\s*(\S+)$", requirement)
        if match:
            entries[normalize(match.group(1))] = {"version": match.group(3), "line": joined,
                                                  "hashes": HASH.findall(joined)}
    return entries


def constraints_text(entries):
    """The lock without hashes: a hashed constraint would switch pip into hash-checking mode for every call,
    in which an editable install is refused."""
    return "".join("%s==%s\n" % (name, entry["version"]) for name, entry in sorted(entries.items()))


def _canonical_version(version):
    # PEP 440 normal forms that differ only in spelling (1.0 vs 1.0.0 are different pins and stay different)
    return version.strip().lower().replace("-", ".").replace("_", ".")


def check_plan(report, entries, editable_dir=None, skip=()):
    """(planned names, refusals, the editable project's name or None, skipped names) from a pip --dry-run --report
    document."""
    planned, refusals, editable_name, skipped = [], [], None, []
    skip = set(normalize(name) for name in skip)
    editable_url = "file://" + os.path.realpath(editable_dir) if editable_dir else None
    for item in report.get("install", []):
        metadata = item.get("metadata", {})
        name, version = normalize(metadata.get("name", "")), metadata.get("version", "")
        download = item.get("download_info", {})
        if download.get("dir_info", {}).get("editable") or (
                editable_url and download.get("url", "").rstrip("/") == editable_url):
            editable_name = name
            continue
        if name in skip:
            skipped.append(name)
            continue
        entry = entries.get(name)
        if entry is None:
            refusals.append("%s %s is not in the lock" % (name, version))
        elif _canonical_version(entry["version"]) != _canonical_version(version):
            refusals.append("%s %s is planned, the lock pins %s" % (name, version, entry["version"]))
        elif not entry["hashes"]:
            refusals.append("%s %s has no hash in the lock" % (name, version))
        else:
            planned.append(name)
    return planned, refusals, editable_name, skipped


def source_only_lines(entries, names):
    """The lock's lines of the source-only distributions it pins (names it lacks are left out)."""
    return [entries[name]["line"] for name in sorted(set(normalize(n) for n in names)) if name in entries]


def local_file_lines(entries, downloaded):
    """name -> 'name @ file:///path --hash=...' for each downloaded source-only file (install lines), from a
    name -> path map."""
    return {name: "%s @ file://%s %s" % (name, path, " ".join("--hash=sha256:%s" % h for h in entries[name]["hashes"]))
            for name, path in downloaded.items()}


def requirement_names(specs):
    return [normalize(re.split(r"[<>=!~\[;\s@]", spec.strip(), maxsplit=1)[0]) for spec in specs if spec.strip()]


class Runner:
    def __init__(self, module, python, lock_path, skip=(), compile_modules=True, source_only=()):
        self.module, self.python, self.lock_path = module, python, lock_path
        self.scratch = tempfile.mkdtemp(prefix="dapo-pip-")
        self.editable_name = None
        self.skip, self.skipped = list(skip), []
        self.entries = parse_lock(open(lock_path).read())
        if not self.entries:
            module.fail_json(msg="%s pins no package: not a lock" % lock_path)
        self.source_only = [normalize(n) for n in source_only if normalize(n) in self.entries]
        # wheels only, but for the source-only names; no build in an environment pip fills from the index
        self.formats = ["--only-binary=:all:", "--no-build-isolation"] + \
            ["--no-binary=%s" % name for name in self.source_only]
        self.install_options = ([] if compile_modules else ["--no-compile"]) + self.formats
        self.local, self.local_lines = {}, {}
        self.constraints = os.path.join(self.scratch, "constraints.txt")
        with open(self.constraints, "w") as out:
            out.write(constraints_text(self.entries))

    def fetch_source_only(self):
        """Download the source-only files hash-checked (pip checks before it prepares metadata), then constrain
        the plan to those files."""
        # one installed at its locked version satisfies the plan as it is (pip fetches nothing for it); a file URL
        # constraint would make pip reinstall it on every run
        installed = self._installed_versions(self.source_only)
        wanted = [n for n in self.source_only
                  if _canonical_version(installed.get(n) or "") != _canonical_version(self.entries[n]["version"])]
        lines = source_only_lines(self.entries, wanted)
        if lines and self.module.run_command([self.python, "-c", "import setuptools"])[0] != 0:
            lines = []  # no build backend yet (the first call installs the lock's): nothing may be built
        if not lines:
            self.formats = [f for f in self.formats if not f.startswith("--no-binary=")]
            self.install_options = [f for f in self.install_options if not f.startswith("--no-binary=")]
            return
        directory = os.path.join(self.scratch, "source-only")
        path = os.path.join(self.scratch, "source-only.txt")
        with open(path, "w") as out:
            out.write("".join(line + "\n" for line in lines))
        command = [self.python, "-m", "pip", "download", "--disable-pip-version-check", "--quiet", "--no-deps",
                   "--require-hashes", "--no-build-isolation", "-d", directory, "-r", path] + \
            ["--no-binary=%s" % name for name in self.source_only]
        rc, out, err = self.module.run_command(command, cwd=self.scratch)
        if rc != 0:
            self.module.fail_json(msg="pip failed to download the source-only packages %s hash-checked: %s"
                                      % (", ".join(self.source_only), _last_error(err or out)), cmd=command, rc=rc)
        for filename in sorted(os.listdir(directory)):
            stem = normalize(filename)
            for name in self.source_only:
                if stem.startswith("%s-%s" % (name, normalize(self.entries[name]["version"]))):
                    self.local[name] = os.path.join(directory, filename)
        self.local_lines = local_file_lines(self.entries, self.local)
        with open(self.constraints, "w") as out:
            out.write("".join("%s @ file://%s\n" % (n, self.local[n]) if n in self.local else
                              "%s==%s\n" % (n, e["version"]) for n, e in sorted(self.entries.items())))

    def _installed_versions(self, names):
        rc, out, _ = self.module.run_command([self.python, "-c", INSTALLED_VERSIONS] + list(names))
        return json.loads(out) if rc == 0 and out.strip() else {}

    def pip(self, args, what):
        command = [self.python, "-m", "pip", "install", "--disable-pip-version-check"] + args
        rc, out, err = self.module.run_command(command, cwd=self.scratch)
        if rc != 0:
            self.module.fail_json(msg="pip failed to %s: %s" % (what, _last_error(err or out)), cmd=command,
                                  stdout=out, stderr=err, rc=rc)
        return out

    def plan(self, args, editable_dir=None):
        report = os.path.join(self.scratch, "report.json")
        self.pip(["--dry-run", "--quiet", "--report", report, "-c", self.constraints] + self.formats + args,
                 "plan the install against the lock %s" % self.lock_path)
        with open(report) as f:
            planned, refusals, self.editable_name, skipped = check_plan(json.load(f), self.entries, editable_dir,
                                                                        self.skip)
        self.skipped += [name for name in skipped if name not in self.skipped]
        if refusals:
            self.module.fail_json(msg="refusing to install packages the stack lock %s does not pin: %s (regenerate "
                                      "the lock with `dapo-ops stack lock` if the stack needs them)"
                                      % (self.lock_path, "; ".join(refusals)), refused=refusals)
        return planned

    def install(self, names):
        if not names or self.module.check_mode:
            return
        path = os.path.join(self.scratch, "locked.txt")
        with open(path, "w") as out:
            out.write("".join(self.local_lines.get(name, self.entries[name]["line"]) + "\n" for name in names))
        self.pip(self.install_options + ["--require-hashes", "--no-deps", "-r", path], "install from the lock")


def _last_error(text):
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return " ".join(errors[-3:] if errors else lines[-3:])


def main():
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "lock": {"type": "path", "required": True},
            "requirements": {"type": "list", "elements": "str", "default": []},
            "requirement_files": {"type": "list", "elements": "path", "default": []},
            "editable": {"type": "path"},
            "build_requirements": {"type": "bool", "default": True},
            "build_requirements_exclude": {"type": "list", "elements": "str", "default": []},
            "reinstall_editable": {"type": "bool", "default": False},
            "skip": {"type": "list", "elements": "str", "default": []},
            "compile": {"type": "bool", "default": True},
            "source_only": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    for path, what in ((params["python"], "python"), (params["lock"], "lock")):
        if not os.path.exists(path):
            module.fail_json(msg="%s %s does not exist" % (what, path))
    runner = Runner(module, params["python"], params["lock"], params["skip"], params["compile"],
                    params["source_only"])
    editable = params["editable"]
    installed = []
    try:
        runner.fetch_source_only()
        if editable and params["build_requirements"] and os.path.exists(os.path.join(editable, "pyproject.toml")):
            rc, out, err = module.run_command([params["python"], "-c", BUILD_REQUIRES,
                                               os.path.join(editable, "pyproject.toml")])
            if rc != 0:
                module.fail_json(msg="cannot read %s/pyproject.toml: %s" % (editable, _last_error(err or out)))
            excluded = set(requirement_names(params["build_requirements_exclude"]))
            build = [spec for spec, name in zip(json.loads(out), requirement_names(json.loads(out)))
                     if name not in excluded]
            if build:
                planned = runner.plan(build)
                runner.install(planned)
                installed += planned
        args = list(params["requirements"])
        for path in params["requirement_files"]:
            args += ["-r", path]
        if editable:
            args += ["--no-build-isolation", "-e", editable]
        if args:
            planned = runner.plan(args, editable)
            runner.install(planned)
            installed += planned
        editable_installed = False
        if editable:
            rc, out, _ = module.run_command([params["python"], "-c", EDITABLE_FROM, runner.editable_name or ""])
            current = out.strip() if rc == 0 else ""
            if params["reinstall_editable"] or os.path.realpath(current or "/nonexistent") != os.path.realpath(editable):
                editable_installed = True
                if not module.check_mode:
                    runner.pip(runner.install_options + ["--no-deps", "--no-build-isolation", "-c",
                                                         runner.constraints, "-e", editable],
                               "install %s editable" % editable)
    finally:
        shutil.rmtree(runner.scratch, ignore_errors=True)
    module.exit_json(changed=bool(installed) or editable_installed,
                     installed=["%s==%s" % (n, runner.entries[n]["version"]) for n in installed],
                     editable_installed=editable_installed, left_out=runner.skipped)


if __name__ == "__main__":
    main()
