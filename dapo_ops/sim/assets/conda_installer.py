# Stand-in for a Miniconda installer (`bash Miniconda3-...sh -b -p PREFIX [-u]`) in the dapo-ops simulated fleet,
# built on venv because Miniconda cannot be downloaded there. PACKAGE and CONDA_CLI are prepended by the builder.
import os
import subprocess
import sys

RUN_FILE = sys.argv[1] if len(sys.argv) > 1 else "Miniconda3.sh"
args = sys.argv[2:]


def usage():
    print("usage: %s [options]\n\n-b           run install in batch mode (without manual intervention)\n"
          "-p PREFIX    install prefix, defaults to $HOME/miniconda3\n-u           update an existing installation"
          % os.path.basename(RUN_FILE))


batch = "-b" in args
update = "-u" in args
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
    if args[i] not in ("-b", "-u", "-f"):
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
conda = os.path.join(prefix, "bin", "conda")
with open(conda, "w") as f:
    f.write(CONDA_CLI.replace("__CONDA_VERSION__", PACKAGE["conda_version"]))
os.chmod(conda, 0o755)
with open(os.path.join(prefix, "conda-meta", "history"), "w") as f:
    f.write("# installed by %s\n" % os.path.basename(RUN_FILE))
print("installation finished.")
