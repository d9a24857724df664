"""Every module of dapo_ops and dapo_sim imports on its own, with nothing of either package imported before it: an
import cycle hidden by import order (pip-tools' tests/test_circular_imports.py habit) fails here. One interpreter,
with both packages dropped from sys.modules before each module, so third-party imports are paid once."""

import subprocess
import sys

from dapo_ops.paths import PROJECT_ROOT

PROBE = r"""
import importlib, json, pkgutil, sys
import dapo_ops, dapo_sim
names = sorted(m.name for pkg in (dapo_ops, dapo_sim)
               for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."))
# __main__ modules run their command; rehearsal_driver is shipped to the head and imports Ray, which the controller
# need not have
skip = {n for n in names if n.endswith(".__main__") or n.endswith(".rehearsal_driver")}
failed = {}
for name in names:
    if name in skip:
        continue
    for loaded in [m for m in sys.modules if m.split(".")[0] in ("dapo_ops", "dapo_sim")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"checked": len(names) - len(skip), "failed": failed}))
"""


def test_every_module_imports_alone():
    import json
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=PROJECT_ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["failed"] == {}
    assert report["checked"] > 100
