# Stand-in for a Miniconda installer (`bash Miniconda3-...sh -b [-k] -p PREFIX [-u]`) in the dapo-ops simulated
# fleet, built on venv because Miniconda cannot be downloaded there. PACKAGE and CONDA_CLI are prepended by the builder.
#
# The package cache: a constructor-built installer unpacks its conda packages into PREFIX/pkgs, installs the base
# environment from them and then, unless the installer was built with `keep_pkgs: true` or run with -k ("do not
# clear the package cache after installation"), removes PREFIX/pkgs (conda/constructor constructor/header.sh:
# getopts "bifhkp:s...", `if [ "$KEEP_PKGS" = "0" ]; then rm -rf "$PREFIX"/pkgs`; CONSTRUCT.md `keep_pkgs`, default
# false). This stand-in models that default. What it leaves in pkgs/ are the records `conda create --offline
# python=X.Y` needs: the base environment's python and pip (pkgs/<name>-<version>-<build>/info/index.json and
# info/repodata_record.json). The base environment's own records are PREFIX/conda-meta/<dist>.json, with the package
# file's sha256 and md5 as conda records every installed package (conda 24.7.1 conda/models/records.py
# PrefixRecord). The stand-in ships no package files: its digests are those of the file's name (package_digests),
# the same function the simulated channel (dapo_sim/conda_channel.py) uses, so a faithful mirror agrees.
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys

RUN_FILE = sys.argv[1] if len(sys.argv) > 1 else "Miniconda3.sh"
args = sys.argv[2:]


def usage():
    print("usage: %s [options]\n\n-b           run install in batch mode (without manual intervention)\n"
          "-k           do not clear the package cache after installation\n"
          "-p PREFIX    install prefix, defaults to $HOME/miniconda3\n-u           update an existing installation"
          % os.path.basename(RUN_FILE))


def package_digests(subdir, fn):
    name = ("%s/%s" % (subdir, fn)).encode()
    return {"sha256": hashlib.sha256(name).hexdigest(), "md5": hashlib.md5(name).hexdigest()}


def write_json(path, data):
    with open(path, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)


batch = "-b" in args
update = "-u" in args
keep_pkgs = "-k" in args
prefix = os.path.expanduser("~/miniconda3")
i = 0
while i < len(args):
    if args[i] == "-p":
        if i + 1 >= len(args):
            usage()
            sys.exit(1)
        prefix = args[i + 1]
        i += 2
        continue
    if args[i] not in ("-b", "-u", "-f", "-k"):
        if args[i] in ("-h", "--help"):
            usage()
            sys.exit(0)
        print("ERROR: did not recognize option '%s', please try -h" % args[i])
        sys.exit(1)
    i += 1
if not batch:
    print("Welcome to Miniconda3 %s\n\nIn order to continue the installation process, please review the license "
          "agreement.\nThis stand-in supports batch mode only: run with -b -p PREFIX." % PACKAGE["version"])
    sys.exit(1)
if os.path.exists(prefix) and not update:
    print("ERROR: File or directory already exists: '%s'\nIf you want to update an existing installation, use the "
          "-u option." % prefix)
    sys.exit(1)
print("PREFIX=%s\nUnpacking payload ..." % prefix)
subprocess.run(["/usr/bin/python3", "-m", "venv", prefix], check=True)
os.makedirs(os.path.join(prefix, "conda-meta"), exist_ok=True)
os.makedirs(os.path.join(prefix, "envs"), exist_ok=True)
subdir = {"aarch64": "linux-aarch64", "x86_64": "linux-64"}.get(PACKAGE.get("arch"), "linux-aarch64")
conda = os.path.join(prefix, "bin", "conda")
with open(conda, "w") as f:
    f.write(CONDA_CLI.replace("__CONDA_VERSION__", PACKAGE["conda_version"]).replace("__CONDA_SUBDIR__", subdir))
os.chmod(conda, 0o755)
pkgs = os.path.join(prefix, "pkgs")
base = {"python": platform.python_version()}
pip = subprocess.run([os.path.join(prefix, "bin", "python"), "-c", "import pip; print(pip.__version__)"],
                     capture_output=True, text=True)
if pip.returncode == 0:
    base["pip"] = pip.stdout.strip()
urls = []
channel = "https://repo.anaconda.com/pkgs/main"
for name, version in base.items():
    build = "dapo_0"
    dist = "%s-%s-%s" % (name, version, build)
    record = {"name": name, "version": version, "build": build, "build_number": 0, "subdir": subdir,
              "depends": []}
    info = os.path.join(pkgs, dist, "info")
    os.makedirs(info, exist_ok=True)
    write_json(os.path.join(info, "index.json"), record)
    url = "%s/%s/%s.conda" % (channel, subdir, dist)
    installed = dict(record, channel=channel + "/" + subdir, fn=dist + ".conda", url=url,
                     **package_digests(subdir, dist + ".conda"))
    write_json(os.path.join(info, "repodata_record.json"), installed)
    write_json(os.path.join(prefix, "conda-meta", dist + ".json"), installed)
    urls.append(url)
with open(os.path.join(pkgs, "urls.txt"), "w") as f:
    f.write("\n".join(urls) + "\n")
if not keep_pkgs:
    shutil.rmtree(pkgs)
with open(os.path.join(prefix, "conda-meta", "history"), "w") as f:
    f.write("# installed by %s\n" % os.path.basename(RUN_FILE))
print("installation finished.")
