#!/usr/bin/python3
# Stand-in for the `conda` command of a Miniconda install, built on venv (Miniconda cannot be downloaded in the
# dapo-ops simulated fleet). Supports what the dapo-ops roles use: --version, create -n NAME python=X.Y [-y],
# run -n NAME CMD..., env list / info --envs, env remove -n NAME [-y].
import os
import shutil
import subprocess
import sys

PREFIX = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENVS = os.path.join(PREFIX, "envs")
CONDA_VERSION = "__CONDA_VERSION__"
BASE_PYTHON = "/usr/bin/python3"


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


def create(args):
    name = take(args, "-n", "--name")
    yes = any(a in args for a in ("-y", "--yes"))
    specs = [a for a in args if not a.startswith("-")]
    if not name:
        print("CondaValueError: either -n NAME or -p PREFIX option required,\ntry \"conda create -h\" for more details")
        return 1
    python = [s for s in specs if s.startswith("python")]
    others = [s for s in specs if not s.startswith("python")]
    if others:
        print("PackagesNotFoundError: The following packages are not available from current channels:\n\n  - "
              + "\n  - ".join(others))
        return 1
    have = base_python_version()
    if python:
        wanted = python[0].split("=", 1)[1].lstrip("=") if "=" in python[0] else have
        if not (wanted == have or wanted.startswith(have + ".")):
            print("PackagesNotFoundError: The following packages are not available from current channels:\n\n"
                  "  - python=%s" % wanted)
            return 1
    target = env_prefix(name)
    if os.path.exists(target):
        if not yes:
            print("CondaSystemExit: A conda environment already exists at '%s'; pass -y to replace it" % target)
            return 1
        print("WARNING: A conda environment already exists at '%s'\nRemove existing environment: y" % target)
        shutil.rmtree(target)
    os.makedirs(ENVS, exist_ok=True)
    subprocess.run([BASE_PYTHON, "-m", "venv", target], check=True)
    os.makedirs(os.path.join(target, "conda-meta"), exist_ok=True)
    with open(os.path.join(target, "conda-meta", "history"), "w") as f:
        f.write("# cmd: conda create -n %s %s\n" % (name, " ".join(specs)))
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
