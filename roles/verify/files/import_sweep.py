"""Import every top-level module of every distribution installed in this Python environment, and the modules the
job itself runs, and print one JSON verdict. Standard library only: it runs inside the node's env (with the CANN
environment sourced, as a job's processes are), started by the verify role and by the audit's live probe.

Each module is imported in a child forked from this process, which holds only the standard library: every import
starts as in a fresh interpreter (no import's side effects reach another, so the verdict does not depend on the
order), costs no interpreter start, and a failure, crash or hang is recorded (distribution, module, the
exception's last line) while the sweep goes on, so one failure cannot hide another.

Which modules: a distribution's top_level.txt, else the top-level names of the files its RECORD lists; a namespace
package (no __init__.py of its own, e.g. protobuf's `google`) stands for the shallowest regular packages and modules
below it. Names that are no importable API are left out by the rule in NOT_API. The current directory is not on
sys.path (`python -c` puts it first): a stray file there must not stand in for an installed module.

The job's own modules (`--job-module MODULE=DIST[@DIR]`, from the stack manifest's job_imports) are imported the
same way, DIR (the checkout the job runs from) in front of sys.path for that module.

Stand-ins (`--standin DIST`, from the inventory's dapo_import_standins; empty on real nodes): a distribution named
there is not imported, and a failure caused by one (a missing name or submodule of a stand-in's module, or raised
in a stand-in's own files) is recorded as skipped with the stand-in it needs, not as an error.

Re-runs are cheap: `--cache FILE` keeps the verdict with a fingerprint of the environment: sys.path, the variables
that decide what an import loads (ENVIRONMENT), and every importable file (.py, .so, .pth, dist-info) under the
env's site-packages, the editable checkouts and the job's checkouts, by path, size and mtime (GNU find), and, when
those changed, by content (sha256, kept in FILE.files and computed again only for files whose size or mtime changed:
a file rewritten with the same bytes, as setuptools-scm does with vLLM's _version.py at every pip plan, changes
nothing). While the fingerprint is unchanged the recorded verdict is printed again without importing anything. A
verdict with a crash, a hang or a passed `--deadline` is not kept.

When the files changed but nothing else did (the interpreter, sys.path, the variables, the arguments), only the
imports the change can touch run again: each kept result names the top-level modules its import loaded from the
env's files, those it looked for and did not find (an optional import, which loads once something installs it),
and the distributions whose metadata it read (importlib.metadata by name; every one, for a lister of all of them or
pkg_resources). An import runs again when one of those changed, when it failed, or when a .pth file changed.
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
import tempfile
import time
import traceback

SWEEP_VERSION = 3
# What decides which files an import loads besides sys.path (the CANN environment script sets most of them).
ENVIRONMENT = ("PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "LD_PRELOAD", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME",
               "ASCEND_OPP_PATH", "ASCEND_AICPU_PATH", "ATB_HOME_PATH", "USE_TORCH")
IMPORTABLE = ("*.py", "*.so", "*.pyd", "*.pth")
# errors that say nothing about the env (the verdict carrying one is not kept)
TRANSIENT = ("the importing process died", "the import did not finish", "not imported: the sweep's deadline")
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
    """The shallowest regular packages and modules below a namespace package (at any depth: opentelemetry's
    exporter/prometheus), from the paths under it; private names left out."""
    candidates = set()
    for rest in inner:
        parts = rest.split("/")
        if parts[-1] == "__init__.py":
            path = tuple(parts[:-1])
        elif parts[-1].endswith(".py"):
            path = tuple(parts[:-1]) + (parts[-1][:-3],)
        elif EXTENSION.match(parts[-1]):
            path = tuple(parts[:-1]) + (EXTENSION.match(parts[-1]).group(1),)
        else:
            continue
        if path and all(part.isidentifier() and not part.startswith("_") for part in path):
            candidates.add(path)
    regular = {tuple(rest.split("/")[:-1]) for rest in inner if rest.split("/")[-1] == "__init__.py"}
    shallowest = [path for path in candidates if not any(path[:i] in regular for i in range(1, len(path)))]
    return ["%s.%s" % (name, ".".join(path)) for path in sorted(shallowest)]


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
            modules.extend(_below_namespace(name, namespaces[name]) or [name])
    if not modules and not left_out and files:
        left_out["(none)"] = "no importable module in its RECORD or top_level.txt"
    return modules, left_out


def _editable_root(dist):
    try:
        info = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return None
    return _file_url_path(info) if isinstance(info, dict) else None


def _file_url_path(info):
    """The directory of an editable install's direct_url.json (a file:// URL, percent-decoded)."""
    from urllib.parse import unquote, urlparse

    url = str(info.get("url") or "")
    if (info.get("dir_info") or {}).get("editable") and url.startswith("file://"):
        return unquote(urlparse(url).path)
    return None


def installed():
    """name -> distribution, the first of a name on sys.path (the one `import` finds)."""
    found = {}
    for dist in metadata.distributions():
        found.setdefault(normalize(dist.metadata["Name"]), dist)
    return found


def _roots(extra=()):
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
            root = _file_url_path(data) if isinstance(data, dict) else None
            if root and os.path.isdir(root):
                editable.add(root)
    return sorted(set(sites) | editable | {d for d in extra if os.path.isdir(d)})


def _importable(name):
    return name.endswith((".py", ".so", ".pyd", ".pth"))


def _listing_by_find(roots):
    """(path, size, mtime) of every importable file under the roots: GNU find, a C walk (~30k files in a few tens of
    ms); a file in a *.dist-info directory counts too (RECORD, METADATA, top_level.txt, entry points)."""
    names = []
    for pattern in IMPORTABLE:
        names += ["-name", pattern, "-o"]
    command = ["find", "-H", *roots, "(", "-name", "__pycache__", "-o", "-name", ".git", ")", "-prune", "-o",
               "!", "-type", "d", "(", *names, "-path", "*.dist-info/*", ")", "-printf", "%p\t%s\t%T@\n"]
    try:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    return sorted(tuple(line.split("\t")) for line in result.stdout.decode("utf-8", "surrogateescape").splitlines()
                  if line.count("\t") == 2)


def _listing_by_walk(roots):
    found = []
    for root in roots:
        stack = [root]
        while stack:
            directory = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in ("__pycache__", ".git"):
                        stack.append(entry.path)
                    continue
                if not (_importable(entry.name) or ".dist-info/" in entry.path):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                found.append((entry.path, str(st.st_size), "%d" % st.st_mtime_ns))
    return sorted(found)


def _sha256(path):
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        return "unreadable: %s" % exc.strerror
    return digest.hexdigest()


class Fingerprint:
    """The env's fingerprint in two parts: `listing` (paths, sizes, mtimes: cheap) and, computed only when the
    listing differs from the kept one, `content` (paths, sizes, sha256 of each file)."""

    def __init__(self, arguments, extra_roots=()):
        self.roots = _roots(extra_roots)
        entries = _listing_by_find(self.roots)
        method = "find"
        if entries is None:
            entries, method = _listing_by_walk(self.roots), "walk"
        self.entries = entries
        environment = {name: os.environ.get(name) for name in ENVIRONMENT}
        self.head = json.dumps([SWEEP_VERSION, sys.version, arguments, sys.path, environment, self.roots, method])
        digest = hashlib.sha256(self.head.encode())
        for entry in entries:
            digest.update(("\0".join(entry) + "\n").encode("utf-8", "surrogateescape"))
        self.listing = digest.hexdigest()

    def content(self, known):
        """The content digest and the files map {path: [size, mtime, sha256]}; `known` is the kept map, whose hash is
        reused for a file whose size and mtime did not change."""
        files, digest = {}, hashlib.sha256(self.head.encode())
        for path, size, mtime in self.entries:
            old = known.get(path)
            sha = old[2] if isinstance(old, list) and len(old) == 3 and old[:2] == [size, mtime] else _sha256(path)
            files[path] = [size, mtime, sha]
            digest.update(("%s\0%s\0%s\n" % (path, size, sha)).encode("utf-8", "surrogateescape"))
        return digest.hexdigest(), files


class Blame:
    """Which stand-in, if any, a failed import needs: a missing name or submodule of a stand-in's module, or an
    exception raised in a stand-in's own files (its innermost frame), anywhere in the exception's chain."""

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
            frames = traceback.extract_tb(exc.__traceback__)
            if frames and self._file(frames[-1].filename):        # raised in a stand-in's own files
                return self._file(frames[-1].filename)
            exc = exc.__cause__ or exc.__context__
        return None


def _describe(exc, blame):
    try:
        last = (str(exc).strip().splitlines() or [""])[-1][:500]
    except Exception:  # an exception whose __str__ fails still names its type
        last = ""
    try:
        needs = blame(exc)
    except Exception:
        needs = None
    return {"ok": False, "error": "%s: %s" % (type(exc).__name__, last) if last else type(exc).__name__,
            "needs": needs}


# Reading any distribution's metadata, not one by name: such an import depends on every dist-info.
EVERY_DIST = "*"
METADATA_READERS = ("pkg_resources", "importlib_metadata")


def _record_metadata_reads(read):
    """Note in `read` the distributions whose metadata the import asks for by name (importlib.metadata's version,
    distribution, requires, ... all go through Distribution.from_name), and EVERY_DIST when it lists them all."""
    from_name, listing = metadata.Distribution.from_name.__func__, metadata.distributions

    def by_name(cls, name):
        read.add(normalize(name))
        return from_name(cls, name)

    def every(**kwargs):
        read.add(EVERY_DIST)
        return listing(**kwargs)

    metadata.Distribution.from_name = classmethod(by_name)
    metadata.distributions = every


class _Misses:
    """Last on sys.meta_path: asked only for what no other finder found, it notes the top-level name (an optional
    import that is missing now may load, and break the import, once something installs it)."""

    def __init__(self):
        self.names = set()

    def find_spec(self, name, path=None, target=None):
        self.names.add(name.split(".")[0])
        return None


def loaded_tops(before, roots):
    """The top-level names of the modules an import added to sys.modules from files under `roots` (its
    dependencies among the env's files: a change to one of them can change the import's outcome)."""
    tops = set()
    for name in [n for n in list(sys.modules) if n not in before]:
        top = name.split(".")[0]
        if top in tops:
            continue
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", None) or ()), None)
        if isinstance(where, str) and any(where.startswith(root) for root in roots):
            tops.add(top)
    return tops


def _import_in_child(module, paths, blame, write_fd, timeout, roots=()):
    """In a forked child: import one module, write the result (one JSON line) to write_fd, exit at once, whatever
    happens (no atexit handler of the imported module runs). The parent holds only the standard library, so each
    import starts as in a fresh interpreter, and nothing one import does reaches another. The child leads its own
    process group (what the import starts goes with it) and cannot outlive its time (an alarm). With `roots` (a
    cached sweep), the result also names what the import loaded from them and whose metadata it read."""
    # bound before the import: a module may replace what the report is written with (json.dumps, os.write)
    dumps, write, exit_now, clock = json.dumps, os.write, os._exit, time.monotonic
    roots = tuple(root.rstrip("/") + "/" for root in roots)
    try:
        os.setpgid(0, 0)
        signal.alarm(int(timeout) + 5)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(null, 2)
        sys.path[:0] = paths
        before, read, misses = set(sys.modules), set(), _Misses()
        if roots:
            _record_metadata_reads(read)
            sys.meta_path.append(misses)
        started = clock()
        try:
            importlib.import_module(module)
            result = {"ok": True}
        except BaseException as exc:  # every failure is the verdict, SystemExit and KeyboardInterrupt included
            result = _describe(exc, blame)
        result["seconds"] = round(clock() - started, 3)
        if roots:
            tops = loaded_tops(before, roots) | misses.names
            if tops.intersection(METADATA_READERS):
                read.add(EVERY_DIST)
            result.update(deps=sorted(tops), dists=sorted(read))
        payload = (dumps(result) + "\n").encode()
        while payload:
            payload = payload[write(write_fd, payload):]
    finally:
        exit_now(0)


def _end(pid):
    """Kill what is left of a child's process group and reap the child, without blocking on one that does not die
    (a process stuck in the kernel): the init process reaps it later."""
    for kill in (os.killpg, os.kill):      # the group; the child itself, had it not yet led a group of its own
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for _ in range(50):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return status
        time.sleep(0.02)
    return None


def run_imports(jobs, blame, workers, timeout, deadline=None, roots=()):
    """jobs: [(key, module, extra sys.path entries)] -> {key: result}, at most `workers` imports at a time, each in
    its own forked child. Past `deadline` (time.monotonic()), what has not been imported is recorded as such."""
    pending, running, results = list(jobs), {}, {}
    selector = selectors.DefaultSelector()

    def finish(read_fd):
        key, module, pid, _, chunks = running.pop(read_fd)
        selector.unregister(read_fd)
        os.close(read_fd)
        status = _end(pid)
        try:
            results[key] = json.loads(b"".join(chunks))
        except ValueError:
            how = ("signal %d" % os.WTERMSIG(status) if os.WIFSIGNALED(status) else
                   "exit code %d" % os.WEXITSTATUS(status)) if status is not None else "no exit status"
            results[key] = {"ok": False, "needs": None, "error": "the importing process died (%s)" % how}

    while pending or running:
        if deadline is not None and time.monotonic() > deadline:
            for read_fd in list(running):
                key = running[read_fd][0]
                finish(read_fd)
                results[key] = {"ok": False, "needs": None, "error": "not imported: the sweep's deadline passed"}
            for key, _, _ in pending:
                results[key] = {"ok": False, "needs": None, "error": "not imported: the sweep's deadline passed"}
            break
        while pending and len(running) < workers:
            key, module, paths = pending.pop(0)
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                _import_in_child(module, paths, blame, write_fd, timeout, roots)
            os.close(write_fd)
            running[read_fd] = (key, module, pid, time.monotonic(), [])
            selector.register(read_fd, selectors.EVENT_READ)
        for event, _ in selector.select(timeout=0.5):
            read_fd = event.fd
            chunk = os.read(read_fd, 65536)
            running[read_fd][4].append(chunk)
            # done at the end of the result line, or at EOF (a helper the import started may keep the pipe open)
            if not chunk or chunk.endswith(b"\n"):
                finish(read_fd)
        now = time.monotonic()
        for read_fd, (key, _, _, started, _) in list(running.items()):
            if now - started > timeout:
                finish(read_fd)
                results[key] = {"ok": False, "needs": None, "error": "the import did not finish in %ds" % timeout}
    return results


def job_modules(args):
    """[(module, distribution, checkout or None)] from `--job-module MODULE=DIST[@DIR]`."""
    out = []
    for item in args["job_module"]:
        module, _, rest = item.partition("=")
        source, _, path = rest.partition("@")
        out.append((module, source, path or None))
    return out


def parse_args(argv):
    args = {"standin": [], "job_module": [], "cache": None, "workers": None, "timeout": 180, "deadline": None}
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
    for key in ("workers", "timeout", "deadline"):
        try:
            if args[key] is not None and float(args[key]) <= 0:
                raise ValueError
        except ValueError:
            raise SystemExit("import_sweep: --%s must be a positive number (found %r)" % (key, args[key]))
    return args


def _key(key):
    dist, module, job = key
    return "%s\t%s\t%d" % (dist, module, job)


class Changes:
    """What changed in the env since the kept sweep, from the two file maps ({path: [size, mtime, sha256]}): the
    top-level names whose files changed, the distributions whose metadata changed, and whether a .pth file (which
    changes sys.path for every import) did."""

    def __init__(self, old, new, roots):
        roots = sorted((root.rstrip("/") + "/" for root in roots), key=len, reverse=True)
        self.tops, self.dists, self.everything = set(), set(), False
        for path in set(old) | set(new):
            if (old.get(path) or [None] * 3)[2] == (new.get(path) or [None] * 3)[2]:
                continue
            root = next((r for r in roots if path.startswith(r)), None)
            first = path[len(root):].split("/")[0] if root else ""
            if first.endswith((".dist-info", ".egg-info")):
                self.dists.add(normalize(first.split("-")[0]))
            elif first.endswith(".pth") or not first:
                self.everything = True
            else:
                match = EXTENSION.match(first)
                self.tops.add(match.group(1) if match else first[:-3] if first.endswith(".py") else
                              first[:-5] if first.endswith(".libs") else first)

    def touch(self, result):
        """Whether a kept result may no longer hold: it failed, or the import loaded or read something that changed."""
        if self.everything or not result.get("ok") or "deps" not in result:
            return True
        dists = set(result.get("dists") or ())
        return bool(self.tops.intersection(result["deps"]) or self.dists.intersection(dists)
                    or (EVERY_DIST in dists and self.dists))


def sweep(args, dists, roots=(), kept=None, changes=None):
    """The verdict over `dists`, and every import's result by key. With `kept` results and the `changes` since, an
    import whose kept result the changes cannot touch is not done again."""
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
    for module, source, path in job_modules(args):
        dist = normalize(source) if source else owner.get(module.split(".")[0], "?")
        if dist in standins:
            skipped.append({"dist": dist, "module": module, "why": "stand-in", "job": True})
        else:
            jobs.append(((dist, module, True), module, [path] if path else []))
    workers = int(args["workers"] or max(1, min(4, os.cpu_count() or 1)))
    deadline = time.monotonic() + float(args["deadline"]) if args["deadline"] else None
    reused = {}
    if kept is not None and changes is not None:
        reused = {key: kept[_key(key)] for key, _, _ in jobs
                  if isinstance(kept.get(_key(key)), dict) and not changes.touch(kept[_key(key)])}
    results = run_imports([job for job in jobs if job[0] not in reused], Blame(standin_modules, standin_dirs),
                          workers, float(args["timeout"]), deadline, roots)
    results.update(reused)
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
    verdict = {"distributions": len(dists), "modules": len(jobs), "imported": imported, "errors": errors,
               "skipped": skipped, "left_out": left_out, "workers": workers, "reused": len(reused),
               "slowest": sorted(timings.items(), key=lambda kv: -kv[1])[:5]}
    return verdict, {_key(key): results[key] for key, _, _ in jobs}


def _load(path, default):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default


def _save(path, data):
    """Write-and-rename through a private temporary name (verify and an audit may sweep at once)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".import-sweep-", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _reusable(verdict):
    return not any(str(e.get("error", "")).startswith(TRANSIENT) for e in verdict.get("errors") or [])


def main(argv):
    start = time.monotonic()
    if sys.path and sys.path[0] == "":     # `python -c`: the current directory is no place to import from
        del sys.path[0]
    args = parse_args(argv)
    key = {k: args[k] for k in ("standin", "job_module")}
    cache = args["cache"]
    print_ = sys.stdout.write
    mark = Fingerprint(key, [path for _, _, path in job_modules(args) if path]) if cache else None
    kept = _load(cache, {}) if cache else {}
    if not isinstance(kept, dict) or kept.get("sweep") != SWEEP_VERSION or not isinstance(kept.get("verdict"), dict):
        kept = {}
    content = files = None
    if mark is not None and kept and kept.get("listing") != mark.listing:
        content, files = mark.content(_load(cache + ".files", {}) if kept else {})
    if mark is not None and kept and (kept.get("listing") == mark.listing or kept.get("content") == content):
        if files is not None:              # the same content under new mtimes: keep them, so the next check is cheap
            try:
                _save(cache + ".files", files)
                _save(cache, dict(kept, listing=mark.listing))
            except OSError:
                pass
        verdict = dict(kept["verdict"], cached=True, seconds=round(time.monotonic() - start, 3))
        print_(json.dumps(verdict) + "\n")
        return 0
    verdict = {"sweep": SWEEP_VERSION, "python": "%d.%d.%d" % sys.version_info[:3]}
    changes, kept_results = None, None
    if mark is not None and files is not None and kept.get("head") == mark.head and isinstance(kept.get("results"), dict):
        # the same interpreter, paths, variables and arguments: only what the changed files can touch is imported
        changes, kept_results = Changes(_load(cache + ".files", {}), files, mark.roots), kept["results"]
    found, results = sweep(args, installed(), mark.roots if mark is not None else (), kept_results, changes)
    verdict.update(found)
    verdict["swept_seconds"] = round(time.monotonic() - start, 3)
    if mark is not None and _reusable(verdict):
        if files is None:
            content, files = mark.content(_load(cache + ".files", {}))
        try:
            _save(cache + ".files", files)
            _save(cache, {"sweep": SWEEP_VERSION, "listing": mark.listing, "content": content, "head": mark.head,
                          "verdict": verdict, "results": results})
        except OSError as exc:
            verdict["cache_error"] = str(exc)
    verdict.update(cached=False, seconds=round(time.monotonic() - start, 3))
    print_(json.dumps(verdict) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
