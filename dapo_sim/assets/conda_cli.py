#!/usr/bin/python3
# Stand-in for the `conda` command of a Miniconda install, built on venv (Miniconda cannot be downloaded in the
# dapo-ops simulated fleet). Supports what the dapo-ops roles use: --version, create -n NAME python=X.Y [-y]
# [--offline] [-c URL ... [--override-channels]], run -n NAME CMD..., env list / info --envs, env remove -n NAME [-y].
# Specs: name, name=X.Y (fuzzy), name==X.Y.Z and name==X.Y.Z=BUILD (exact; conda/models/match_spec.py).
# The environment records the package it took, with the record's digests, as conda-meta/<name>-<version>-<build>.json
# (conda 24.7.1 conda/models/records.py PrefixRecord); from a channel, with the channel's record.
#
# Channels behave as in conda 24.7.1 (conda/conda tag 24.7.1):
# - `defaults` is https://repo.anaconda.com/pkgs/main and /pkgs/r (conda/base/constants.py DEFAULT_CHANNELS_UNIX),
#   or the comma-separated CONDA_DEFAULT_CHANNELS (conda reads every setting from CONDA_<NAME>); -c adds channels
#   before it; --override-channels drops it and requires -c (conda/base/context.py `channels`: "At least one -c /
#   --channel flag must be supplied when using --override-channels.").
# - every channel's <subdir>/repodata.json and noarch/repodata.json are fetched; an unreachable one fails the
#   command with CondaHTTPError "HTTP 000 CONNECTION FAILED" (conda/gateways/repodata/__init__.py
#   conda_http_errors, conda/exceptions.py CondaHTTPError), as on a node with no route to the channel.
# - --offline (or CONDA_OFFLINE=true) drops every channel that is not file:// ("Filters out all channel URLs that
#   do not use the file:// protocol", docs/source/user-guide/configuration/settings.rst `offline`) and adds the
#   package cache PREFIX/pkgs to the index (conda/core/index.py get_reduced_index: _supplement_index_with_cache
#   when context.offline; conda-libmamba-solver PR #423 "Enable --offline installs from pkgs_dirs").
# - a spec nothing provides fails with PackagesNotFoundError (conda/exceptions.py).
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

PREFIX = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENVS = os.path.join(PREFIX, "envs")
PKGS = os.path.join(PREFIX, "pkgs")
CONDA_VERSION = "__CONDA_VERSION__"
SUBDIR = "__CONDA_SUBDIR__"
BASE_PYTHON = "/usr/bin/python3"
DEFAULT_CHANNELS = ("https://repo.anaconda.com/pkgs/main", "https://repo.anaconda.com/pkgs/r")
CHANNEL_ALIAS = "https://conda.anaconda.org"
CONNECT_TIMEOUT = 9.15  # conda's remote_connect_timeout_secs default


class CondaError(Exception):
    pass


def base_python_version():
    out = subprocess.run([BASE_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def take(args, *names):
    for name in names:
        if name in args:
            i = args.index(name)
            if i + 1 < len(args):
                value = args[i + 1]
                del args[i:i + 2]
                return value
    return None


def env_prefix(name):
    return PREFIX if name == "base" else os.path.join(ENVS, name)


def _truthy(value):
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def channel_urls(channels, override):
    """The channel URLs conda would search, in order."""
    if override and not channels:
        raise CondaError("ArgumentError: At least one -c / --channel flag must be supplied when using "
                         "--override-channels.")
    names = list(channels) + ([] if override else ["defaults"])
    urls = []
    for name in names:
        if name == "defaults":
            env = os.environ.get("CONDA_DEFAULT_CHANNELS", "")
            expanded = [c.strip() for c in env.split(",") if c.strip()] or list(DEFAULT_CHANNELS)
        elif "://" in name:
            expanded = [name]
        else:
            expanded = [CHANNEL_ALIAS + "/" + name]
        urls += [u.rstrip("/") for u in expanded if u.rstrip("/") not in urls]
    return urls


def fetch_repodata(url):
    """One channel subdir's repodata.json, as conda fetches it; errors as conda reports them."""
    full = url + "/repodata.json"
    try:
        with urllib.request.urlopen(full, timeout=CONNECT_TIMEOUT) as response:
            return json.loads(response.read().decode())
    except urllib.error.HTTPError as exc:
        if exc.code in (403, 404):
            raise CondaError("UnavailableInvalidChannel: HTTP %d %s for channel %s <%s>\n\nThe channel is not "
                             "accessible or is invalid." % (exc.code, str(exc.reason).upper(),
                                                            url.rsplit("/", 1)[0], url.rsplit("/", 1)[0]))
        status, reason = exc.code, str(exc.reason).upper()
    except (urllib.error.URLError, OSError, ValueError):
        status, reason = "000", "CONNECTION FAILED"
    if url.startswith("https://repo.anaconda.com/"):
        hint = ("\nIf your current network has https://repo.anaconda.com blocked, please file\n"
                "a support request with your network engineering team.\n\n")
    else:
        hint = ""
    raise CondaError("CondaHTTPError: HTTP %s %s for url <%s>\nElapsed: -\n\nAn HTTP error occurred when trying to "
                     "retrieve this URL.\nHTTP errors are often intermittent, and a simple retry will get you on your "
                     "way.\n%s'%s'\n" % (status, reason, full, hint, url))


def cached_records():
    """The package cache the installer left: PREFIX/pkgs/<dist>/info/repodata_record.json (the record with its
    channel and digests), or info/index.json where that is missing."""
    records = []
    for info in sorted(glob.glob(os.path.join(PKGS, "*", "info"))):
        for name in ("repodata_record.json", "index.json"):
            try:
                with open(os.path.join(info, name)) as f:
                    records.append(json.load(f))
                break
            except (OSError, ValueError):
                continue
    return records


def index(urls, offline):
    records = []
    for url in urls:
        if offline and not url.startswith("file://"):
            continue
        for subdir in (SUBDIR, "noarch"):
            data = fetch_repodata(url + "/" + subdir)
            for group in ("packages", "packages.conda"):
                records += [dict(record, channel=url + "/" + subdir, fn=fn, url="%s/%s/%s" % (url, subdir, fn))
                            for fn, record in (data.get(group) or {}).items()]
    if offline:
        records += cached_records()
    return records


def parse_spec(spec):
    """name, version, build, exact from name | name=X.Y | name==X.Y.Z | name==X.Y.Z=BUILD."""
    name, _, rest = spec.partition("=")
    exact = rest.startswith("=")
    version, _, build = rest.lstrip("=").partition("=")
    return name, version, build, exact


def matches(record, spec):
    name, version, build, exact = parse_spec(spec)
    if record.get("name") != name:
        return False
    have = str(record.get("version", ""))
    if exact and have != version or build and record.get("build") != build:
        return False
    return not version or have == version or have.startswith(version + ".")


def create(args):
    parser = argparse.ArgumentParser(prog="conda create", add_help=False)
    parser.add_argument("-n", "--name")
    parser.add_argument("-y", "--yes", action="store_true")
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument("--offline", action="store_true")
    parser.add_argument("-c", "--channel", action="append", default=[])
    parser.add_argument("--override-channels", action="store_true")
    parser.add_argument("specs", nargs="*")
    opts = parser.parse_args(args)
    name = opts.name
    if not name:
        print("CondaValueError: either -n NAME or -p PREFIX option required,\ntry \"conda create -h\" for more details",
              file=sys.stderr)
        return 1
    offline = opts.offline or _truthy(os.environ.get("CONDA_OFFLINE", ""))
    try:
        urls = channel_urls(opts.channel, opts.override_channels)
        shown = [c for c in opts.channel] + ([] if opts.override_channels else ["defaults"])
        print("Channels:\n" + "".join(" - %s\n" % c for c in shown) + "Platform: %s" % SUBDIR)
        print("Collecting package metadata (repodata.json): ...", end=" ")
        try:
            records = index(urls, offline)
        except CondaError:
            print("failed\n")
            raise
        print("done")
        specs = [s for s in opts.specs]
        chosen = {s: [r for r in records if matches(r, s)] for s in specs}
        missing = [s for s in specs if not chosen[s]]
        have = base_python_version()
        for spec in specs:
            package, version, _, _ = parse_spec(spec)
            version = version or have
            if package == "python" and spec not in missing and not (
                    version == have or version.startswith(have + ".") or have.startswith(version + ".")):
                missing.append(spec)
        unsupported = [s for s in specs if parse_spec(s)[0] != "python"]
        if unsupported and not missing:
            missing = unsupported  # the stand-in can only create a Python environment
        if missing:
            listed = [u + "/" + d for u in urls if not (offline and not u.startswith("file://"))
                      for d in (SUBDIR, "noarch")]
            raise CondaError("PackagesNotFoundError: The following packages are not available from current "
                             "channels:\n\n" + "".join("  - %s\n" % m for m in missing) + "\nCurrent channels:\n\n"
                             + "".join("  - %s\n" % u for u in listed))
    except CondaError as exc:
        print("\n" + str(exc), file=sys.stderr)
        return 1
    target = env_prefix(name)
    if os.path.exists(target):
        if not opts.yes:
            print("CondaSystemExit: A conda environment already exists at '%s'; pass -y to replace it" % target)
            return 1
        print("WARNING: A conda environment already exists at '%s'\nRemove existing environment: y" % target)
        shutil.rmtree(target)
    os.makedirs(ENVS, exist_ok=True)
    subprocess.run([BASE_PYTHON, "-m", "venv", target], check=True)
    os.makedirs(os.path.join(target, "conda-meta"), exist_ok=True)
    with open(os.path.join(target, "conda-meta", "history"), "w") as f:
        f.write("# cmd: conda create %s\n" % " ".join(args))
    for spec in specs:
        record = chosen[spec][-1]
        with open(os.path.join(target, "conda-meta", "%s-%s-%s.json" % (record["name"], record["version"],
                                                                         record["build"])), "w") as f:
            json.dump(record, f, indent=2, sort_keys=True)
    print("#\n# To activate this environment, use\n#\n#     $ conda activate %s\n#" % name)
    return 0


def run(args):
    name = take(args, "-n", "--name")
    for flag in ("--no-capture-output", "--live-stream"):
        while flag in args:
            args.remove(flag)
    target = env_prefix(name or "base")
    if not os.path.isdir(os.path.join(target, "conda-meta")) and target != PREFIX:
        print("EnvironmentLocationNotFound: Not a conda environment: %s" % target)
        return 1
    if not args:
        print("CondaError: no command given to run")
        return 1
    env = dict(os.environ)
    env["PATH"] = os.path.join(target, "bin") + os.pathsep + env.get("PATH", "")
    env["CONDA_PREFIX"] = target
    env["CONDA_DEFAULT_ENV"] = name or "base"
    env["VIRTUAL_ENV"] = target
    try:
        os.execvpe(args[0], args, env)
    except FileNotFoundError:
        print("%s: command not found" % args[0], file=sys.stderr)
        return 127


def env_list():
    print("# conda environments:\n#")
    print("%-25s %s" % ("base", PREFIX))
    if os.path.isdir(ENVS):
        for name in sorted(os.listdir(ENVS)):
            print("%-25s %s" % (name, os.path.join(ENVS, name)))
    return 0


def env_remove(args):
    name = take(args, "-n", "--name")
    target = env_prefix(name) if name else None
    if not target or target == PREFIX or not os.path.isdir(target):
        print("EnvironmentLocationNotFound: Not a conda environment: %s" % target)
        return 1
    shutil.rmtree(target)
    return 0


def main(argv):
    args = list(argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: conda [--version] {create,run,env,info} ...")
        return 0 if args else 2
    if args[0] in ("--version", "-V"):
        print("conda %s" % CONDA_VERSION)
        return 0
    command, rest = args[0], args[1:]
    if command == "create":
        return create(rest)
    if command == "run":
        return run(rest)
    if command == "env" and rest[:1] == ["list"] or command == "info" and "--envs" in rest:
        return env_list()
    if command == "env" and rest[:1] == ["remove"]:
        return env_remove(rest[1:])
    print("CommandNotFoundError: this conda stand-in does not implement %r" % command)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
