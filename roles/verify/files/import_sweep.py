"""Import every top-level module of every distribution installed in this Python environment, and the modules the
job itself runs, and print one JSON verdict. Standard library only: it runs inside the node's env (with the CANN
environment sourced, as a job's processes are), started by the verify role and by the audit's live probe.

Each module is imported in a child forked from this process, which holds only the standard library: every import
starts as in a fresh interpreter (no import's side effects reach another, so the verdict does not depend on the
order), costs no interpreter start, and a failure, crash or hang is recorded (distribution, module, the
exception's last line) while the sweep goes on, so one failure cannot hide another.

Which modules: a distribution's top_level.txt, else the top-level names of the files its RECORD lists; a namespace
package (no __init__.py of its own, e.g. protobuf's `google`) stands for the packages right below it. Names that
are no importable API are left out by the rule in NOT_API.

The job's own modules (`--job-module MODULE=DIST`, from the stack manifest's job_imports) are imported the same way,
with `--job-path DIR` (the checkout the job runs from) in front of sys.path.

Stand-ins (`--standin DIST`, from the inventory's dapo_import_standins; empty on real nodes): a distribution named
there is not imported, and a failure caused by one (a missing name or submodule of a stand-in's module, or raised
in a stand-in's own files) is recorded as skipped with the stand-in it needs, not as an error.

Re-runs are cheap: `--cache FILE` keeps the verdict with a fingerprint of the environment (the size and
modification time of every file under its site-packages and editable source roots, __pycache__ aside, listed by
GNU find); while the
fingerprint is unchanged the recorded verdict is printed again without importing anything.
"""

import hashlib
import importlib.metadata as metadata
import json
import os
import re
import importlib
import selectors
import signal
import subprocess
import sys
import time
import traceback

SWEEP_VERSION = 1
# Top-level names some wheels ship that are no importable API (a packaging slip, not the package): their imports
# need test or build tooling the stack does not install.
NOT_API = {"tests": "a test suite shipped in the wheel", "test": "a test suite shipped in the wheel",
           "testing": "a test suite shipped in the wheel", "examples": "example scripts shipped in the wheel",
           "benchmarks": "benchmark scripts shipped in the wheel", "docs": "documentation shipped in the wheel"}
EXTENSION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\.(?:[^.]+\.)?(?:so|pyd)$")

def normalize(name):
    return re.sub(r"[-_.]+", "-", name or "").lower()


def _record_modules(files):
    """Top-level module names from a RECORD: (name, is a regular package or module)."""
    regular, namespaces = set(), {}
    for path in files:
        parts = str(path).split("/")
        if parts[0].endswith((".dist-info", ".egg-info", ".data")) or parts[0] in ("..", ""):
            continue
        if len(parts) == 1:
            match = EXTENSION.match(parts[0])
            if parts[0].endswith(".py"):
                regular.add(parts[0][:-3])
            elif match:
                regular.add(match.group(1))
            continue
        if len(parts) == 2 and parts[1] == "__init__.py":
            regular.add(parts[0])
        else:
            namespaces.setdefault(parts[0], set()).add("/".join(parts[1:]))
    return regular, namespaces


def _below_namespace(name, inner):
    """The packages and modules right below a namespace package, from the paths under it."""
    found = set()
    for rest in inner:
        parts = rest.split("/")
        if len(parts) == 2 and parts[1] == "__init__.py":
            found.add(parts[0])
        elif len(parts) == 1 and parts[0].endswith(".py") and parts[0] != "__init__.py":
            found.add(parts[0][:-3])
        elif len(parts) == 1 and EXTENSION.match(parts[0]):
            found.add(EXTENSION.match(parts[0]).group(1))
    return ["%s.%s" % (name, sub) for sub in sorted(found)]


def dist_modules(dist):
    """(modules to import, {left-out name: why}) of one distribution."""
    files = [str(f) for f in (dist.files or [])]
    regular, namespaces = _record_modules(files)
    listed = (dist.read_text("top_level.txt") or "").split()
    names = listed or sorted(regular | set(namespaces))
    shipped = regular | set(namespaces) if _editable_root(dist) is None and (regular or namespaces) else None
    modules, left_out = [], {}
    for name in names:
        name = name.replace("/", ".")
        if name == "__pycache__":
            continue
        if shipped is not None and name.split(".")[0] not in shipped:
            left_out[name] = "named by top_level.txt, not installed at the top level (RECORD)"
        elif name in NOT_API:
            left_out[name] = NOT_API[name]
        elif name.endswith(".libs") and not listed:
            left_out[name] = "the wheel's bundled shared libraries (auditwheel), not a module"
        elif not all(part.isidentifier() for part in name.split(".")) or name.startswith("__") or (
                "." in name and not listed):
            left_out[name] = "not an importable name"
        elif name in regular or name not in namespaces:
            modules.append(name)
        else:
            below = [m for m in _below_namespace(name, namespaces[name]) if not m.rsplit(".", 1)[1].startswith("_")]
            modules.extend(below or [name])
    return modules, left_out


def _editable_root(dist):
    try:
        info = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return None
    url = info.get("url") or ""
    if (info.get("dir_info") or {}).get("editable") and url.startswith("file://"):
        return url[len("file://"):]
    return None


def installed():
    """name -> distribution, the first of a name on sys.path (the one `import` finds)."""
    found = {}
    for dist in metadata.distributions():
        found.setdefault(normalize(dist.metadata["Name"]), dist)
    return found


def _roots():
    """The directories the env's distributions are installed in (the sys.path entries holding *.dist-info), and
    the source roots of its editable installs (their direct_url.json)."""
    sites, editable = [], set()
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        infos = [n for n in names if n.endswith(".dist-info")]
        if infos:
            sites.append(os.path.abspath(entry))
        for info in infos:
            try:
                with open(os.path.join(entry, info, "direct_url.json")) as fh:
                    data = json.load(fh)
            except (OSError, ValueError):
                continue
            if not isinstance(data, dict):
                continue
            url = str(data.get("url") or "")
            if (data.get("dir_info") or {}).get("editable") and url.startswith("file://") and \
                    os.path.isdir(url[len("file://"):]):
                editable.add(url[len("file://"):])
    return sorted(set(sites) | editable)


def _listing_by_find(roots):
    """Every file's path, size and mtime under the roots (GNU find, a C walk: ~30k files in a few tens of ms)."""
    command = ["find", *roots, "(", "-name", "__pycache__", "-o", "-name", ".git", ")", "-prune", "-o",
               "!", "-type", "d", "-printf", "%p\t%s\t%T@\t%y\n"]
    try:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def _listing_by_walk(roots):
    lines = []
    for root in roots:
        stack = [root]
        while stack:
            directory = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False) and entry.name in ("__pycache__", ".git"):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    lines.append("%s\t%d\t%d" % (entry.path, st.st_size, st.st_mtime_ns))
    return "\n".join(sorted(lines)).encode()


def fingerprint(arguments):
    """A digest of the path, size and mtime of every file under the env's site-packages and its editable installs'
    source roots (__pycache__ and .git aside), and of the sweep's own arguments: an installed, removed, replaced or
    edited module changes it. Directories are left out: an import that byte-compiles a module makes its
    __pycache__ and so changes the directory's mtime, not what is installed."""
    roots = _roots()
    listing = _listing_by_find(roots)
    method = "find"
    if listing is None:
        listing, method = _listing_by_walk(roots), "walk"
    digest = hashlib.sha256(json.dumps([SWEEP_VERSION, sys.version, arguments, roots, method]).encode())
    digest.update(listing)
    return digest.hexdigest()


class Blame:
    """Which stand-in, if any, a failed import needs: a missing name or submodule of a stand-in's module, or an
    exception raised in a stand-in's own files, anywhere in the exception's chain."""

    def __init__(self, modules, directories):
        self.modules = modules                                  # top-level module -> stand-in distribution
        self.directories = [(d.rstrip("/") + "/", dist) for d, dist in directories]

    def _module(self, name):
        return self.modules.get((name or "").split(".")[0])

    def _file(self, path):
        return next((dist for root, dist in self.directories if path.startswith(root)), None)

    def __call__(self, exc):
        seen = set()
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            if isinstance(exc, ImportError) and self._module(exc.name):
                return self._module(exc.name)
            obj = getattr(exc, "obj", None) if isinstance(exc, AttributeError) else None
            if isinstance(obj, type(sys)) and self._module(obj.__name__):
                return self._module(obj.__name__)
            for frame in traceback.extract_tb(exc.__traceback__):
                if self._file(frame.filename):
                    return self._file(frame.filename)
            exc = exc.__cause__ or exc.__context__
        return None


def _import_in_child(module, paths, blame, write_fd):
    """In a forked child: import one module, write the result to write_fd, exit. The parent holds only the standard
    library, so each import starts as in a fresh interpreter, and nothing one import does reaches another."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(null, 2)
    sys.path[:0] = paths
    # bound before the import: a module may replace what the report is written with (json.dumps, os.write)
    dumps, write, exit_now, clock = json.dumps, os.write, os._exit, time.monotonic
    started = clock()
    try:
        importlib.import_module(module)
        result = {"ok": True}
    except BaseException as exc:  # every failure is the verdict, SystemExit and KeyboardInterrupt included
        last = (str(exc).strip().splitlines() or [""])[-1]
        result = {"ok": False, "error": "%s: %s" % (type(exc).__name__, last) if last else type(exc).__name__,
                  "needs": blame(exc)}
    result["seconds"] = round(clock() - started, 3)
    write(write_fd, dumps(result).encode())
    exit_now(0)


def run_imports(jobs, blame, workers, timeout):
    """jobs: [(key, module, extra sys.path entries)] -> {key: result}, at most `workers` imports at a time, each in
    its own forked child."""
    pending, running, results = list(jobs), {}, {}
    selector = selectors.DefaultSelector()
    while pending or running:
        while pending and len(running) < workers:
            key, module, paths = pending.pop(0)
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                _import_in_child(module, paths, blame, write_fd)
            os.close(write_fd)
            running[read_fd] = (key, module, pid, time.monotonic(), [])
            selector.register(read_fd, selectors.EVENT_READ)
        for event, _ in selector.select(timeout=1.0):
            read_fd = event.fd
            key, module, pid, started, chunks = running[read_fd]
            chunk = os.read(read_fd, 65536)
            if chunk:
                chunks.append(chunk)
                continue
            selector.unregister(read_fd)
            os.close(read_fd)
            del running[read_fd]
            _, status = os.waitpid(pid, 0)
            try:
                results[key] = json.loads(b"".join(chunks))
            except ValueError:
                how = "signal %d" % os.WTERMSIG(status) if os.WIFSIGNALED(status) else \
                    "exit code %d" % os.WEXITSTATUS(status)
                results[key] = {"ok": False, "needs": None, "error": "the importing process died (%s)" % how}
        now = time.monotonic()
        for read_fd, (key, module, pid, started, _) in list(running.items()):
            if now - started > timeout:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                selector.unregister(read_fd)
                os.close(read_fd)
                del running[read_fd]
                results[key] = {"ok": False, "needs": None, "error": "the import did not finish in %ds" % timeout}
    return results


def parse_args(argv):
    args = {"standin": [], "job_module": [], "job_path": [], "cache": None, "workers": None, "timeout": 180}
    i = 0
    while i < len(argv):
        key = argv[i].lstrip("-").replace("-", "_")
        if key not in args or i + 1 >= len(argv):
            raise SystemExit("import_sweep: unknown option or missing value: %s" % argv[i])
        if isinstance(args[key], list):
            args[key].append(argv[i + 1])
        else:
            args[key] = argv[i + 1]
        i += 2
    return args


def sweep(args, dists):
    standins = {normalize(s) for s in args["standin"]}
    owner, standin_modules, standin_dirs, jobs, skipped, left_out = {}, {}, [], [], [], []
    for name in sorted(dists):
        modules, not_api = dist_modules(dists[name])
        left_out += [{"dist": name, "module": m, "why": why} for m, why in sorted(not_api.items())]
        for module in modules:
            owner.setdefault(module.split(".")[0], name)
            if name in standins:
                standin_modules[module.split(".")[0]] = name
                skipped.append({"dist": name, "module": module, "why": "stand-in"})
            else:
                jobs.append(((name, module, False), module, []))
        if name in standins:
            root = _editable_root(dists[name])
            for module in modules:
                top = module.split(".")[0]
                candidates = [os.path.join(root, top)] if root else []
                candidates.append(str(dists[name].locate_file(top)))
                standin_dirs += [(c, name) for c in candidates if os.path.isdir(c)]
    for item in args["job_module"]:
        module, _, source = item.partition("=")
        dist = normalize(source) if source else owner.get(module.split(".")[0], "?")
        if dist in standins:
            skipped.append({"dist": dist, "module": module, "why": "stand-in", "job": True})
        else:
            jobs.append(((dist, module, True), module, args["job_path"]))
    workers = int(args["workers"] or max(1, min(4, os.cpu_count() or 1)))
    results = run_imports(jobs, Blame(standin_modules, standin_dirs), workers, int(args["timeout"]))
    errors, imported, timings = [], 0, {}
    for (dist, module, job), result in ((key, results[key]) for key, _, _ in jobs):
        timings[dist] = round(timings.get(dist, 0.0) + result.get("seconds", 0.0), 3)
        entry = {"dist": dist, "module": module}
        if job:
            entry["job"] = True
        if result["ok"]:
            imported += 1
        elif result.get("needs"):
            skipped.append(dict(entry, why="needs stand-in %s" % result["needs"], error=result["error"]))
        else:
            errors.append(dict(entry, error=result["error"]))
    return {"distributions": len(dists), "modules": len(jobs), "imported": imported, "errors": errors,
            "skipped": skipped, "left_out": left_out, "workers": workers,
            "slowest": sorted(timings.items(), key=lambda kv: -kv[1])[:5]}


def main(argv):
    start = time.monotonic()
    args = parse_args(argv)
    key = {k: args[k] for k in ("standin", "job_module", "job_path")}
    print_ = sys.stdout.write
    mark = fingerprint(key) if args["cache"] else None
    if mark:
        try:
            with open(args["cache"]) as fh:
                cached = json.load(fh)
            if cached.get("fingerprint") == mark and cached.get("sweep") == SWEEP_VERSION:
                cached.update(cached=True, seconds=round(time.monotonic() - start, 3))
                print_(json.dumps(cached) + "\n")
                return 0
        except (OSError, ValueError, AttributeError):
            pass
    verdict = {"sweep": SWEEP_VERSION, "fingerprint": mark, "python": "%d.%d.%d" % sys.version_info[:3]}
    verdict.update(sweep(args, installed()))
    verdict["swept_seconds"] = round(time.monotonic() - start, 3)
    if args["cache"]:
        tmp = args["cache"] + ".tmp"
        try:
            with open(tmp, "w") as fh:
                json.dump(verdict, fh)
            os.chmod(tmp, 0o644)
            os.replace(tmp, args["cache"])
        except OSError as exc:
            verdict["cache_error"] = str(exc)
    verdict.update(cached=False, seconds=verdict["swept_seconds"])
    print_(json.dumps(verdict) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
