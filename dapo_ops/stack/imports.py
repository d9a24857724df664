"""The import sweep (roles/verify/files/import_sweep.py): every top-level module of every distribution in a node's
env, and the job's own modules (the manifest's job_imports), imported inside the env with the CANN environment
sourced. The verify role and the audit's live probe run the same script with the same arguments, built here; its
verdict is parsed and judged here (pure)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from dapo_ops.errors import InventoryError, ManifestError, ParseError
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.model.variables import IMPORT_STANDINS

SWEEP_SCRIPT = PROJECT_ROOT / "roles" / "verify" / "files" / "import_sweep.py"
# The inventory variable naming the distributions that are stand-ins on a fleet (not imported; a failure one causes
# is skipped, not an error). Real nodes run the real packages and leave it empty; the simulated inventory lists the
# NPU-bound wheels and the source checkouts it serves as stand-ins (dapo_sim/access.py).
STANDINS_VARIABLE = IMPORT_STANDINS.name
WHAT = "import sweep"
_DIST_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class JobImport:
    """A module on the DAPO job's own path (manifest `job_imports`), and the upstream file that imports it."""

    module: str
    source: str                          # the manifest `sources` key of the checkout it belongs to
    imported_by: str
    from_checkout: bool = False          # import it with the checkout's root on sys.path (as the job runs)


def parse_job_imports(items, sources: set[str], source: str) -> tuple[JobImport, ...]:
    """The manifest's `job_imports` list (ManifestError naming the entry when malformed)."""
    items = items or []
    if not isinstance(items, list):
        raise ManifestError(f"{source}: job_imports must be a list")
    out = []
    for index, item in enumerate(items):
        where = f"job_imports[{index}]"
        if not isinstance(item, dict):
            raise ManifestError(f"{source}: {where} must be a mapping")
        module, key, by = item.get("module"), item.get("source"), item.get("imported_by")
        if not isinstance(module, str) or not all(part.isidentifier() for part in module.split(".")):
            raise ManifestError(f"{source}: {where}.module must be a dotted module name (found {module!r})")
        if key not in sources:
            raise ManifestError(f"{source}: {where}.source names no entry of sources (found {key!r})")
        if not isinstance(by, str) or not by.strip():
            raise ManifestError(f"{source}: {where}.imported_by must name the upstream file that imports it")
        if not isinstance(item.get("from_checkout", False), bool):
            raise ManifestError(f"{source}: {where}.from_checkout must be true or false")
        out.append(JobImport(module, key, by.strip(), item.get("from_checkout", False)))
    return tuple(out)


def import_standins(host_vars: dict) -> tuple[str, ...]:
    """The inventory's stand-in distribution names (empty on a real fleet); InventoryError when malformed."""
    value = (host_vars or {}).get(STANDINS_VARIABLE) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and _DIST_NAME.match(v) for v in value):
        raise InventoryError(f"{STANDINS_VARIABLE} must be a list of distribution names (found {value!r})")
    return tuple(value)


# The audit's sweep ends within this many seconds (the host's whole collection has --timeout, 120 s by default):
# modules it could not import by then are errors that say so, and that verdict is not kept.
AUDIT_DEADLINE = 60


def sweep_arguments(manifest, standins, src_root: str, cache: str, deadline: float | None = None) -> list[str]:
    """The sweep's command-line arguments: the stand-ins, the job's modules (with the checkout a module is imported
    from, as the job runs it), the file the verdict is kept in with the env's fingerprint, and a deadline."""
    arguments = []
    for name in standins:
        arguments += ["--standin", str(name)]
    for item in manifest.job_imports:
        where = f"@{src_root.rstrip('/')}/{manifest.source(item.source).dir}" if item.from_checkout else ""
        arguments += ["--job-module", f"{item.module}={item.source}{where}"]
    if deadline is not None:
        arguments += ["--deadline", str(deadline)]
    return arguments + ["--cache", cache]


@dataclass(frozen=True)
class ImportFailure:
    dist: str
    module: str
    error: str
    job: bool = False

    def line(self) -> str:
        what = "the job's module" if self.job else "module"
        return f"{self.dist}: {what} {self.module} does not import: {self.error}"


@dataclass(frozen=True)
class SweepVerdict:
    distributions: int
    modules: int
    imported: int
    errors: tuple[ImportFailure, ...]
    skipped: tuple[dict, ...]
    cached: bool
    seconds: float
    swept_seconds: float

    def as_dict(self) -> dict:
        return {"distributions": self.distributions, "modules": self.modules, "imported": self.imported,
                "errors": [dict(f.__dict__, line=f.line()) for f in self.errors], "skipped": len(self.skipped), "cached": self.cached,
                "seconds": self.seconds, "swept_seconds": self.swept_seconds}


def _int(data: dict, key: str) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ParseError(WHAT, f"{key!r} is not a count")
    return value


def parse_verdict(output: str) -> SweepVerdict:
    """The sweep's JSON verdict (its last line that is a JSON object)."""
    lines = [line for line in (output or "").strip().splitlines() if line.strip()]
    text = next((line for line in reversed(lines) if line.lstrip().startswith("{")), None)
    if text is None:
        raise ParseError(WHAT, f"no verdict: {lines[-1].strip() if lines else 'no output'}")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ParseError(WHAT, f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("errors"), list) or \
            not isinstance(data.get("skipped"), list):
        raise ParseError(WHAT, "no 'errors' and 'skipped' lists")
    errors = []
    for item in data["errors"]:
        if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in ("dist", "module", "error")):
            raise ParseError(WHAT, f"malformed error entry {item!r}"[:200])
        errors.append(ImportFailure(item["dist"], item["module"], item["error"], bool(item.get("job"))))
    return SweepVerdict(distributions=_int(data, "distributions"), modules=_int(data, "modules"),
                        imported=_int(data, "imported"), errors=tuple(errors),
                        skipped=tuple(s for s in data["skipped"] if isinstance(s, dict)),
                        cached=bool(data.get("cached")), seconds=float(data.get("seconds") or 0.0),
                        swept_seconds=float(data.get("swept_seconds") or 0.0))


def verdict_problems(verdict: SweepVerdict) -> list[str]:
    """One line per module that does not import (empty: every module imports or was skipped by the rule)."""
    return [failure.line() for failure in verdict.errors]
