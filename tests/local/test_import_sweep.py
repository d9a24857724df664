"""The import sweep (roles/verify/files/import_sweep.py) run for real against small distributions made here: one
interpreter without site-packages (-S) whose sys.path holds only them."""

import json
import os
import subprocess
import sys

import pytest

from dapo_ops.errors import InventoryError, ParseError
from dapo_ops.manifest import load_manifest
from dapo_ops.stack.imports import (SWEEP_SCRIPT, import_standins, parse_verdict, sweep_arguments,
                                    verdict_problems)


def make_dist(site, name, files, top_level=None):
    """A distribution installed in `site`: its files, a dist-info with METADATA and a RECORD listing them."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    record = [f"{path},," for path in files] + [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    if top_level is not None:
        (info / "top_level.txt").write_text("\n".join(top_level) + "\n")
        record.append(f"{info.name}/top_level.txt,,")
    (info / "RECORD").write_text("\n".join(record) + "\n")


@pytest.fixture
def site(tmp_path):
    site = tmp_path / "site"
    make_dist(site, "good", {"good.py": "print('noise on stdout while importing')\nVALUE = 1\n"})
    make_dist(site, "broken", {"broken/__init__.py": "import json\nraise ImportError('cannot import name X')\n"})
    # changes the interpreter for whoever imports after it: must reach no other import
    make_dist(site, "mutator", {"mutator.py": "import json\njson.dumps = None\n"})
    make_dist(site, "victim", {"victim.py": "import json\njson.dumps({})\n"})
    make_dist(site, "crasher", {"crasher.py": "import os\nos._exit(7)\n"})
    make_dist(site, "nspkg-sub", {"nspkg/sub/__init__.py": "", "nspkg/_private/__init__.py": ""})
    make_dist(site, "shipped-tests", {"shipped/__init__.py": "", "tests/__init__.py": "import pytest_plugin_x\n"})
    make_dist(site, "phantom", {"phantom_real.py": ""}, top_level=["phantom_real", "_phantom_ext"])
    # a stand-in and the packages that need it
    make_dist(site, "fakestand", {"fakestand/__init__.py": "__version__ = '2.7.1'\n",
                                  "fakestand/loud.py": "raise RuntimeError('needs the real thing')\n"})
    make_dist(site, "uses-attr", {"uses_attr.py": "import fakestand\nclass M(fakestand.Tensor):\n    pass\n"})
    make_dist(site, "uses-sub", {"uses_sub.py": "from fakestand.nn import Module\n"})
    make_dist(site, "uses-loud", {"uses_loud.py": "import fakestand.loud\n"})
    make_dist(site, "uses-version", {"uses_version.py": "import fakestand\nassert fakestand.__version__\n"})
    return site


def sweep(site, *args, timeout=60, path=None):
    env = dict(os.environ, PYTHONPATH=str(site), PATH=path or os.environ["PATH"])
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # imports byte-compile (make __pycache__ directories), as on a node
    result = subprocess.run([sys.executable, "-S", str(SWEEP_SCRIPT), *args], capture_output=True, text=True,
                            env=env, timeout=timeout)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def by_module(entries):
    return {e["module"]: e for e in entries}


def test_every_failure_is_reported_by_distribution_and_none_hides_another(site):
    verdict = sweep(site, "--standin", "fakestand")
    errors = by_module(verdict["errors"])
    assert errors["broken"] == {"dist": "broken", "module": "broken", "error": "ImportError: cannot import name X"}
    assert errors["crasher"]["error"] == "the importing process died (exit code 7)"
    assert set(errors) == {"broken", "crasher"}, errors
    imported = {"good", "mutator", "victim", "nspkg.sub", "shipped", "phantom_real", "uses_version"}
    assert verdict["imported"] == len(imported)
    assert verdict["modules"] == len(imported) + 2 + 3     # + the errors + the three skipped for the stand-in


def test_a_stand_in_is_not_imported_and_what_it_causes_is_skipped(site):
    verdict = sweep(site, "--standin", "fakestand")
    skipped = by_module(verdict["skipped"])
    assert skipped["fakestand"]["why"] == "stand-in"
    assert skipped["uses_attr"]["why"] == "needs stand-in fakestand"          # a name the stand-in lacks
    assert skipped["uses_sub"]["why"] == "needs stand-in fakestand"           # a submodule it lacks
    assert skipped["uses_loud"]["why"] == "needs stand-in fakestand"          # raised in its own files
    assert "uses_version" not in skipped                                     # imported for real with it
    without = sweep(site)                                                    # a real fleet names no stand-in
    assert {"uses_attr", "uses_sub", "uses_loud"} <= set(by_module(without["errors"]))


def test_what_is_not_importable_api_is_left_out_with_the_reason(site):
    left_out = by_module(sweep(site)["left_out"])
    assert left_out["tests"]["why"] == "a test suite shipped in the wheel"
    assert left_out["_phantom_ext"]["why"].startswith("named by top_level.txt, not installed")
    assert "nspkg._private" not in left_out and "nspkg" not in left_out


def test_the_current_directory_is_not_imported_from(site, tmp_path):
    stray = tmp_path / "cwd"
    stray.mkdir()
    (stray / "good.py").write_text("raise ImportError('the stray copy in the current directory')\n")
    env = dict(os.environ, PYTHONPATH=str(site))
    result = subprocess.run([sys.executable, "-S", "-c", SWEEP_SCRIPT.read_text()], cwd=stray, capture_output=True,
                            text=True, env=env, timeout=60)
    assert "good" not in by_module(json.loads(result.stdout.splitlines()[-1])["errors"])


def test_a_module_below_a_namespace_at_any_depth_is_imported(site):
    make_dist(site, "deep-exporter", {"deepns/exporter/prom/__init__.py": "raise ImportError('deep code ran')\n",
                                      "deepns/exporter/prom/sub.py": ""})
    errors = by_module(sweep(site)["errors"])
    assert errors["deepns.exporter.prom"]["error"] == "ImportError: deep code ran"


def test_an_import_that_leaves_a_helper_running_is_done_when_it_reports(site):
    make_dist(site, "spawner", {"spawner.py": "import subprocess\nsubprocess.Popen(['sleep', '30'])\n"})
    verdict = sweep(site, "--timeout", "5", timeout=40)
    assert "spawner" not in by_module(verdict["errors"])
    assert subprocess.run(["pgrep", "-f", "^sleep 30$"], capture_output=True).returncode == 1   # ended with it


def test_a_deadline_ends_the_sweep_and_names_what_was_not_imported(site):
    make_dist(site, "hanger", {"hanger.py": "import time\ntime.sleep(60)\n"})
    verdict = sweep(site, "--deadline", "2", "--workers", "1", timeout=40)
    assert any(e["error"] == "not imported: the sweep's deadline passed" for e in verdict["errors"])


def test_a_hung_import_is_cut_off_and_the_sweep_goes_on(site):
    make_dist(site, "hanger", {"hanger.py": "import time\ntime.sleep(60)\n"})
    verdict = sweep(site, "--timeout", "2", timeout=40)
    assert by_module(verdict["errors"])["hanger"]["error"] == "the import did not finish in 2s"
    assert "good" not in by_module(verdict["errors"])


def test_the_job_modules_are_imported_from_their_checkout(site, tmp_path):
    checkout = tmp_path / "verl"
    (checkout / "recipe" / "dapo").mkdir(parents=True)
    (checkout / "recipe" / "dapo" / "trainer.py").write_text("import good\n")
    verdict = sweep(site, "--job-module", f"recipe.dapo.trainer=verl@{checkout}", "--job-module", "good=good")
    assert "recipe.dapo.trainer" not in by_module(verdict["errors"])
    failed = sweep(site, "--job-module", "recipe.dapo.trainer=verl")       # without the checkout on sys.path
    entry = by_module(failed["errors"])["recipe.dapo.trainer"]
    assert entry["dist"] == "verl" and entry["job"] is True and "No module named 'recipe'" in entry["error"]


@pytest.mark.parametrize("lister", ["find", "walk"])
def test_an_unchanged_env_reuses_the_verdict_and_an_edited_module_is_swept_again(site, tmp_path, lister):
    cache = tmp_path / "verdict.json"
    path = str(tmp_path / "no-find") if lister == "walk" else None     # no find on PATH: the Python walk lists
    assert sweep(site, "--cache", str(cache), path=path)["cached"] is False
    assert not cache.exists()                     # a verdict with a crash says nothing lasting about the env: not kept
    import shutil

    (site / "crasher.py").unlink()
    shutil.rmtree(site / "crasher-1.0.dist-info")
    first = sweep(site, "--cache", str(cache), path=path)
    assert first["cached"] is False and cache.exists()
    assert sweep(site, "--cache", str(cache), path=path)["cached"] is True
    with open(site / "good.py", "a") as out:      # same distribution, same metadata, one module broken in place
        out.write("raise AttributeError(\"module 'pyarrow' has no attribute 'PyExtensionType'\")\n")
    again = sweep(site, "--cache", str(cache), path=path)
    assert again["cached"] is False
    assert by_module(again["errors"])["good"]["error"] == (
        "AttributeError: module 'pyarrow' has no attribute 'PyExtensionType'")
    assert sweep(site, "--cache", str(cache), "--standin", "fakestand")["cached"] is False   # other arguments
    (site / "victim.py").write_text((site / "victim.py").read_text())   # same bytes, new mtime (setuptools-scm)
    assert sweep(site, "--cache", str(cache), "--standin", "fakestand")["cached"] is True


def test_a_changed_env_imports_again_only_what_the_changes_can_touch(site, tmp_path):
    """A cached sweep keeps each import's result with what it loaded, what it looked for and did not find, and whose
    metadata it read; after a change only those imports run again (and every one that failed)."""
    import shutil

    (site / "crasher.py").unlink()
    shutil.rmtree(site / "crasher-1.0.dist-info")
    make_dist(site, "uses-good", {"uses_good.py": "import good\n"})
    make_dist(site, "optional-user", {"optional_user.py": "try:\n    import later_pkg\nexcept ImportError:\n    pass\n"})
    make_dist(site, "reads-version", {"reads_version.py": "import importlib.metadata as m\n"
                                                           "assert m.version('good') == '1.0', m.version('good')\n"})
    cache = str(tmp_path / "verdict.json")
    first = sweep(site, "--cache", cache, "--standin", "fakestand")
    assert first["cached"] is False and first["reused"] == 0 and set(by_module(first["errors"])) == {"broken"}
    not_ok = 1 + sum(1 for entry in first["skipped"] if entry["why"].startswith("needs stand-in"))   # run every time

    with open(site / "good.py", "a") as out:            # good changes: good, uses_good (and broken, failed) again
        out.write("# edited\n")
    edited = sweep(site, "--cache", cache, "--standin", "fakestand")
    assert edited["cached"] is False and edited["reused"] == first["modules"] - 2 - not_ok

    with open(site / "good.py", "a") as out:            # good breaks: what imports it breaks with it, and is named
        out.write("raise RuntimeError('good is broken')\n")
    broken = by_module(sweep(site, "--cache", cache, "--standin", "fakestand")["errors"])
    assert set(broken) == {"broken", "good", "uses_good"}
    (site / "good.py").write_text("VALUE = 1\n")

    make_dist(site, "later-pkg", {"later_pkg.py": "raise RuntimeError('installed later, and broken')\n"})
    later = by_module(sweep(site, "--cache", cache, "--standin", "fakestand")["errors"])  # the optional import that was missing runs again
    assert later["optional_user"]["error"] == "RuntimeError: installed later, and broken"
    shutil.rmtree(site / "later_pkg-1.0.dist-info")
    (site / "later_pkg.py").unlink()

    metadata = next(site.glob("good-*.dist-info")) / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 1.0", "Version: 2.0"))
    read = by_module(sweep(site, "--cache", cache, "--standin", "fakestand")["errors"])   # only good's metadata changed: its reader runs again
    assert read["reads_version"]["error"] == "AssertionError: 2.0"
    assert set(read) == {"broken", "reads_version"}


def test_the_verdict_parses_into_one_line_per_failure(site):
    verdict = parse_verdict("noise\n" + json.dumps(sweep(site)) + "\n")
    assert "broken: module broken does not import: ImportError: cannot import name X" in verdict_problems(verdict)
    with pytest.raises(ParseError, match="no verdict"):
        parse_verdict("Traceback...\nKeyError: 'x'\n")


def test_the_arguments_come_from_the_manifest_and_the_inventory():
    manifest = load_manifest()
    arguments = sweep_arguments(manifest, ("torch",), "/opt/src/", "/env/verdict.json")
    assert arguments[:2] == ["--standin", "torch"] and arguments[-2:] == ["--cache", "/env/verdict.json"]
    modules = [arguments[i + 1] for i, a in enumerate(arguments) if a == "--job-module"]
    assert "verl.utils.dataset.rl_dataset=verl" in modules          # from the installed verl
    assert "vllm_ascend.worker.worker_v1=vllm_ascend" in modules
    assert f"recipe.dapo.dapo_ray_trainer=verl@/opt/src/{manifest.source('verl').dir}" in modules  # its checkout
    assert "--deadline" not in arguments
    assert sweep_arguments(manifest, (), "/opt/src", "/c", deadline=60)[-4:] == ["--deadline", "60", "--cache", "/c"]
    assert import_standins({}) == ()
    with pytest.raises(InventoryError, match="dapo_import_standins must be a list"):
        import_standins({"dapo_import_standins": "torch"})
    with pytest.raises(InventoryError):
        import_standins({"dapo_import_standins": ["torch; rm -rf /"]})


@pytest.mark.parametrize("mutate, message", [
    (lambda items: items[0].update(module="recipe/dapo"), "job_imports\\[0\\].module must be a dotted module name"),
    (lambda items: items[1].update(source="sglang"), "job_imports\\[1\\].source names no entry of sources"),
    (lambda items: items[2].pop("imported_by"), "job_imports\\[2\\].imported_by must name the upstream file"),
    (lambda items: items[0].update(from_checkout="yes"), "from_checkout must be true or false"),
])
def test_a_malformed_job_import_is_refused_naming_the_entry(mutate, message):
    import yaml

    from dapo_ops.errors import ManifestError
    from dapo_ops.manifest import parse_manifest
    from dapo_ops.paths import STACK_MANIFEST

    data = yaml.safe_load(STACK_MANIFEST.read_text())
    mutate(data["job_imports"])
    with pytest.raises(ManifestError, match=message):
        parse_manifest(data)
