# Stand-in for a vendor .run installer (driver, firmware, CANN toolkit / kernels / nnal) in the dapo-ops
# simulated fleet. Flags, messages, version files and exit codes follow docs/ascend-formats.md §2.
# Exit codes: 0 done; 2 done, reboot required (the real packages' meaning of 2 is undocumented; ascend-deployer
# `library/process_npu.py` takes ok_returns=[0, 2] and then asks for a reboot); 1 failed. PACKAGE (prepended by the
# builder) describes the package.
# Reboot: exit 2 always comes with the real "reboot" line (docs/ascend-formats.md §2.3, from the public 910B setup
# blog, the driver install scripts and a public RPM install log): the driver when it cannot hot-reset, i.e. a driver is loaded (an
# upgrade, a --force reinstall, an uninstall): "[WARNING]Kernel modules can not be removed, reboot needed..." then
# "Reboot needed for installation/upgrade to take effect!"; the firmware after every install or upgrade: "Reboot
# now or after driver installation for the installation/upgrade to take effect."; a first driver install with
# nothing loaded exits 0 with "The new version takes effect immediately.".
import datetime
import json
import os
import pwd
import shutil
import sys

HW_DIR = os.environ.get("DAPO_SIM_HW_DIR", "/dev/.dapo-sim")
DISPATCH = HW_DIR + "/run"
LOG_DIR = "/var/log/ascend_seclog"
TAG = {"driver": "Driver", "firmware": "Firmware", "toolkit": "Toolkit", "kernels": "Kernels", "nnal": "NNAL"}
FLAGS = {"--check", "--full", "--install", "--upgrade", "--uninstall", "--install-for-all", "--quiet", "--nox11",
         "--force", "--devel"}
VALUED = {"--install-path", "--install-username", "--install-usergroup"}
ACTIONS = ("--check", "--full", "--install", "--upgrade", "--uninstall")


def now():
    return datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def say(level, message):
    line = "[%s] [%s] [%s]%s" % (TAG[PACKAGE["component"]], now(), level, message)
    print(line, flush=True)
    try:
        os.makedirs(LOG_DIR, exist_ok=True)
        with open(os.path.join(LOG_DIR, "ascend_install.log"), "a") as f:
            f.write(line + "\n")
    except OSError:
        pass


def operation(action, result):
    os.makedirs(LOG_DIR, exist_ok=True)
    with open(os.path.join(LOG_DIR, "operation.log"), "a") as f:
        f.write("%s %s %s %s %s\n" % (now(), PACKAGE["component"], PACKAGE["version"], action, result))


def fail(message, code=1):
    say("ERROR", message)
    operation(ACTION, "failed")
    sys.exit(code)


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def launcher(path, tool):
    """The node's tools are symlinks to the emulator's dispatcher, which dispatches on the name it is run as."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.remove(path)
    os.symlink(DISPATCH, path)


def kv_file(info, sep="="):
    return "".join("%s%s%s\n" % (k, sep, v) for k, v in info.items())


def read_kv(path):
    try:
        with open(path) as f:
            return dict(line.strip().split("=", 1) for line in f if "=" in line)
    except OSError:
        return None


def load_hw():
    try:
        with open(os.path.join(HW_DIR, "hw.json")) as f:
            return json.load(f)
    except OSError:
        return None


def save_hw(hw):
    path = os.path.join(HW_DIR, "hw.json")
    with open(path + ".tmp", "w") as f:
        json.dump(hw, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def parse_args(argv):
    flags, values = set(), {}
    for arg in argv:
        name, eq, value = arg.partition("=")
        if name in VALUED and eq:
            values[name] = value
        elif arg in FLAGS:
            flags.add(arg)
        else:
            print("Unrecognized flag : %s" % arg)
            print("Run '%s --help' for help." % os.path.basename(RUN_FILE))
            sys.exit(1)
    actions = [a for a in ACTIONS if a in flags]
    if len(actions) != 1:
        print("[ERROR]Please specify exactly one of --check, --full, --install, --upgrade, --uninstall")
        sys.exit(1)
    return actions[0], flags, values


def verify_archive(quiet):
    if not quiet:
        print("Verifying archive integrity...  100%   SHA256 checksums are OK. All good.")
        print("Uncompressing %s  100%%" % PACKAGE["title"])


def install_user(flags, values):
    recorded = read_kv("/etc/ascend_install.info") or {}
    if "--upgrade" in flags and "--install-username" not in values and recorded.get("UserName"):
        return recorded["UserName"], recorded.get("UserGroup", recorded["UserName"])
    user = values.get("--install-username", "HwHiAiUser")
    group = values.get("--install-usergroup", user)
    if "--install-for-all" in flags and "--install-username" not in values:
        return "root", "root"
    try:
        pwd.getpwnam(user)
    except KeyError:
        fail("The user %s does not exist, please create the user and group first (or pass "
             "--install-username/--install-usergroup)." % user)
    return user, group


def update_install_info(updates):
    path = "/etc/ascend_install.info"
    info = read_kv(path) or {}
    info.update(updates)
    write(path, kv_file(info))


# ------------------------------------------------------------------------------------------------------ driver

def driver(action, flags, values, root):
    hw = load_hw()
    if hw is None or not [n for n in hw["npus"] if n.get("present", True)]:
        fail("Can not detect npu, please check the device with lspci.")
    version_file = os.path.join(root, "driver", "version.info")
    installed = read_kv(version_file)
    if action == "--uninstall":
        if installed is None:
            fail("Driver package is not installed.")
        shutil.rmtree(os.path.join(root, "driver"), ignore_errors=True)
        for p in ("/usr/local/sbin/npu-smi",):
            if os.path.exists(p):
                os.remove(p)
        if not hw["driver"].get("loaded"):
            say("INFO", "Driver package uninstalled successfully!")
            operation(action, "ok")
            return 0
        say("INFO", "Driver package uninstalled successfully! Reboot needed for uninstallation to take effect!")
        operation(action, "ok, reboot needed")
        return 2
    if action == "--full" and installed is not None and "--force" not in flags:
        fail("Driver package has been installed (version %s), please use --upgrade." % installed.get("Version"))
    if action == "--upgrade" and installed is None:
        fail("Driver package is not installed, please use --full.")
    user, group = install_user(flags, values)
    say("INFO", "Start time: %s" % now())
    say("INFO", "LogFile: /var/log/ascend_seclog/ascend_install.log")
    say("INFO", "OperationLogFile: /var/log/ascend_seclog/operation.log")
    say("WARNING", "Do not power off or restart the system during the installation/upgrade")
    say("INFO", "set username and usergroup, %s:%s" % (user, group))
    say("INFO", "driver install type: DKMS")
    for pct in (10, 30, 40):
        say("INFO", "upgradePercentage:%d%%" % pct)
    if hw.get("faults", {}).get("installer") == "dkms-fail":
        say("ERROR", "Dkms install failed, details in : /var/log/ascend_seclog/ascend_install.log")
        fail("Driver_ko_install failed")
    write(version_file, kv_file(PACKAGE["version_info"]))
    launcher(os.path.join(root, "driver", "tools", "hccn_tool"), "hccn_tool")
    launcher(os.path.join(root, "driver", "tools", "upgrade-tool"), "upgrade-tool")
    write(os.path.join(root, "driver", "script", "uninstall.sh"),
          "#!/bin/sh\nexec bash %s --uninstall \"$@\"\n" % RUN_FILE, 0o755)
    os.makedirs(os.path.join(root, "driver", "lib64"), exist_ok=True)
    launcher("/usr/local/sbin/npu-smi", "npu-smi")
    update_install_info({"UserName": user, "UserGroup": group, "Driver_Install_Type": action[2:],
                         "Driver_Install_Path_Param": root,
                         "Driver_Install_For_All": "yes" if "--install-for-all" in flags else "no"})
    say("INFO", "upgradePercentage:90%")
    if action == "--full" and not hw["driver"].get("loaded"):
        say("INFO", "Waiting for device startup...")
        say("INFO", "Device startup success")
        hw["driver"]["loaded"] = PACKAGE["version"]
        save_hw(hw)
        say("INFO", "Driver package installed successfully! The new version takes effect immediately.")
        operation(action, "ok")
        return 0
    hw["driver"]["pending"] = PACKAGE["version"]
    save_hw(hw)
    say("WARNING", "Kernel modules can not be removed, reboot needed...")
    say("INFO", "Driver package installed successfully! Reboot needed for installation/upgrade to take effect!")
    operation(action, "ok, reboot needed")
    return 2


# ---------------------------------------------------------------------------------------------------- firmware

def firmware(action, flags, values, root):
    hw = load_hw()
    if hw is None or not hw["driver"].get("loaded"):
        fail("The driver is not installed or not loaded; install the driver before the firmware.")
    version_file = os.path.join(root, "firmware", "version.info")
    installed = read_kv(version_file)
    if action == "--uninstall":
        if installed is None:
            fail("Firmware package is not installed.")
        shutil.rmtree(os.path.join(root, "firmware"), ignore_errors=True)
        say("INFO", "Firmware package uninstalled successfully!")
        operation(action, "ok")
        return 0
    if action == "--full" and installed is not None and "--force" not in flags:
        fail("Firmware package has been installed (version %s), please use --upgrade." % installed.get("Version"))
    if action == "--upgrade" and installed is None:
        fail("Firmware package is not installed, please use --full.")
    if action == "--install":
        fail("Unsupported operation --install for the firmware package, use --full or --upgrade.")
    chips = len([n for n in hw["npus"] if n.get("present", True)])
    for pct in (0, 30, 60, 90, 100):
        say("INFO", "upgradePercentage: %d%%" % pct)
    write(version_file, kv_file(PACKAGE["version_info"]))
    write(os.path.join(root, "firmware", "script", "uninstall.sh"),
          "#!/bin/sh\nexec bash %s --uninstall \"$@\"\n" % RUN_FILE, 0o755)
    update_install_info({"Firmware_Install_Type": action[2:], "Firmware_Install_Path_Param": root})
    hw["firmware"]["pending"] = PACKAGE["version"]
    save_hw(hw)
    say("INFO", "The firmware of [%d] chips are successfully upgraded." % chips)
    say("INFO", "Firmware package installed successfully! Reboot now or after driver installation for the "
                "installation/upgrade to take effect.")
    operation(action, "ok, reboot needed")
    return 2


# -------------------------------------------------------------------------------------------------------- CANN

TOOLKIT_ENV = """#!/bin/bash
# CANN toolkit environment (dapo-ops simulated fleet)
export ASCEND_TOOLKIT_HOME={root}/ascend-toolkit/latest
export ASCEND_HOME_PATH=${{ASCEND_TOOLKIT_HOME}}
export ASCEND_OPP_PATH=${{ASCEND_TOOLKIT_HOME}}/opp
export ASCEND_AICPU_PATH=${{ASCEND_TOOLKIT_HOME}}
export TOOLCHAIN_HOME=${{ASCEND_TOOLKIT_HOME}}/toolkit
export LD_LIBRARY_PATH=${{ASCEND_TOOLKIT_HOME}}/lib64:{root}/driver/lib64:${{LD_LIBRARY_PATH}}
export PATH=${{ASCEND_TOOLKIT_HOME}}/bin:${{PATH}}
"""

NNAL_ENV = """#!/bin/bash
# NNAL ATB environment (dapo-ops simulated fleet); --cxx_abi=0|1 selects the C++ ABI of the libraries
cxx_abi=1
for arg in "$@"; do
  case "$arg" in
    --cxx_abi=0) cxx_abi=0 ;;
    --cxx_abi=1) cxx_abi=1 ;;
    *) echo "[ERROR] unknown option $arg (use --cxx_abi=0|1)" >&2; return 1 2>/dev/null || exit 1 ;;
  esac
done
# What the real script of the pinned CANN exports (environment dumps from real nodes, e.g. vllm-project/vllm-ascend
# issue #4186): ATB_HOME_PATH ends in cxx_abi_N, the libraries are on LD_LIBRARY_PATH; there is no ATB_CXX_ABI.
export ATB_HOME_PATH={root}/nnal/atb/latest/atb/cxx_abi_${{cxx_abi}}
export LD_LIBRARY_PATH=${{ATB_HOME_PATH}}/lib:${{ATB_HOME_PATH}}/examples:${{ATB_HOME_PATH}}/tests/atbopstest:${{LD_LIBRARY_PATH}}
export PATH=${{ATB_HOME_PATH}}/bin:${{PATH}}
"""


def relink(link, target):
    if os.path.islink(link) or os.path.exists(link):
        os.remove(link)
    os.symlink(target, link)


def cann(action, flags, values, root):
    comp = PACKAGE["component"]
    version = PACKAGE["version"]
    toolkit_dir = os.path.join(root, "ascend-toolkit")
    arch = PACKAGE.get("arch", "aarch64")
    info_path = os.path.join(root, PACKAGE["version_file"])
    installed = os.path.exists(info_path)
    if action == "--uninstall":
        if not installed:
            fail("%s is not installed." % PACKAGE["title"])
        if comp == "toolkit":
            shutil.rmtree(toolkit_dir, ignore_errors=True)
        elif comp == "kernels":
            shutil.rmtree(os.path.join(toolkit_dir, version, "opp_kernel"), ignore_errors=True)
        else:
            shutil.rmtree(os.path.join(root, "nnal"), ignore_errors=True)
        say("INFO", "%s uninstalled successfully." % PACKAGE["title"])
        operation(action, "ok")
        return 0
    if action == "--upgrade" and not installed:
        fail("%s is not installed, use --install or --full." % PACKAGE["title"])
    if comp == "toolkit" and action not in ("--full", "--install", "--upgrade"):
        fail("unsupported operation %s" % action)
    if comp in ("kernels", "nnal") and action == "--full":
        fail("unsupported operation --full for %s, use --install." % PACKAGE["title"])
    if comp == "kernels" and not os.path.exists(os.path.join(toolkit_dir, "latest")):
        fail("Can not find the toolkit or nnae package, please install it first.")
    if comp == "nnal" and not os.environ.get("ASCEND_TOOLKIT_HOME"):
        fail("Please source the set_env.sh of the CANN toolkit before installing NNAL "
             "(source %s/ascend-toolkit/set_env.sh)." % root)
    install_user(flags, values) if "--install-for-all" not in flags and os.geteuid() != 0 else None
    say("INFO", "Start installing %s %s to %s" % (PACKAGE["title"], version, root))
    if comp == "toolkit":
        base = os.path.join(toolkit_dir, version, "%s-linux" % arch)
        write(os.path.join(base, "ascend_toolkit_install.info"), kv_file(PACKAGE["version_info"]))
        for library in ("libhccl.so", "libascendcl.so"):  # what torch_npu and vllm_ascend_C load (stand-ins)
            write(os.path.join(toolkit_dir, version, "lib64", library), "placeholder: %s\n" % library)
        os.makedirs(os.path.join(toolkit_dir, version, "bin"), exist_ok=True)
        relink(os.path.join(toolkit_dir, "latest"), version)
        write(os.path.join(toolkit_dir, "set_env.sh"), TOOLKIT_ENV.format(root=root), 0o755)
        inner = PACKAGE["version_info"].get("innerversion", "")
        write(os.path.join(toolkit_dir, version, "version.cfg"),
              "# version: 1.0\nruntime_running_version=[%s:%s]\ntoolkit_running_version=[%s:%s]\n"
              % (inner, version, inner, version))
    elif comp == "kernels":
        write(os.path.join(toolkit_dir, version, "opp_kernel", "version.info"), kv_file(PACKAGE["version_info"]))
    else:
        atb = os.path.join(root, "nnal", "atb")
        for abi in ("0", "1"):
            os.makedirs(os.path.join(atb, version, "atb", "cxx_abi_" + abi, "lib"), exist_ok=True)
        write(os.path.join(atb, version, "version.info"), kv_file(PACKAGE["version_info"], " : "))
        relink(os.path.join(atb, "latest"), version)
        write(os.path.join(atb, "set_env.sh"), NNAL_ENV.format(root=root), 0o755)
    say("INFO", "%s install success" % PACKAGE["title"])
    operation(action, "ok")
    return 0


def main():
    global ACTION
    action, flags, values = parse_args(sys.argv[1:])
    ACTION = action
    verify_archive("--quiet" in flags)
    if action == "--check":
        return 0
    if os.geteuid() != 0:
        fail("Permission denied: run the installer as root.")
    root = values.get("--install-path", "/usr/local/Ascend")
    comp = PACKAGE["component"]
    if comp == "driver":
        return driver(action, flags, values, root)
    if comp == "firmware":
        return firmware(action, flags, values, root)
    return cann(action, flags, values, root)


RUN_FILE = sys.argv[1] if len(sys.argv) > 1 else "installer.run"
del sys.argv[0]
ACTION = None
if __name__ == "__main__":
    sys.exit(main())
