"""Integration tests against the simulated fleet (root, network namespaces, sshd).

Without root or sshd these tests are skipped, except when DAPO_OPS_REQUIRE_SIM=1 (CI sets it), where a
missing prerequisite fails the run instead of passing it by skipping.
"""

import json
import os
import shutil

import pytest

from dapo_sim.fleet import SIM_INVENTORY_DIR, SimFleet

from .cpu_usage import Meter
from .groups import SITE_FLEET_MODULES

pytestmark = pytest.mark.sim
# dapo-ops commands without -i read the simulated fleet's inventory, as `dapo-sim up` tells an operator to set
os.environ["ANSIBLE_INVENTORY"] = str(SIM_INVENTORY_DIR)  # never an operator's own
os.environ.pop("DAPO_OPS_INVENTORY", None)


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("ip", "unshare", "nsenter", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if not os.path.exists("/usr/sbin/sshd"):
        return "needs openssh-server"
    return None




def _module_order(item) -> int:
    name = item.fspath.basename
    return SITE_FLEET_MODULES.index(name) if name in SITE_FLEET_MODULES else -1


def pytest_collection_modifyitems(config, items):
    first = next((i for i, item in enumerate(items) if _module_order(item) >= 0), None)
    if first is not None:  # the sharing modules together, where the first of them was, in the order above
        sharing = sorted((item for item in items if _module_order(item) >= 0), key=_module_order)
        rest = [item for item in items if _module_order(item) < 0]
        items[:] = rest[:first] + sharing + rest[first:]
    reason = _missing()
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.sim)
            if reason:
                if os.environ.get("DAPO_OPS_REQUIRE_SIM") == "1":
                    raise pytest.UsageError(f"DAPO_OPS_REQUIRE_SIM=1 but the simulated fleet {reason}")
                item.add_marker(pytest.mark.skip(reason=f"simulated fleet {reason}"))


CPU = Meter()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    before = CPU.seconds()
    yield
    CPU.record(before, "setup", item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    before = CPU.seconds()
    yield
    CPU.record(before, "call", item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    before = CPU.seconds()
    yield
    CPU.record(before, "teardown", item.nodeid)


def pytest_terminal_summary(terminalreporter):
    lines = CPU.summary()
    if lines:
        terminalreporter.write_sep("=", "costliest by CPU (the group's processes, on the nodes too)")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def sim() -> SimFleet:
    return SimFleet()


class SiteFleet:
    """A 2 x 16 fleet (node2 starting on firmware 7.5.0.1.129 and its driver) after one full site.yml run, shared by
    SITE_FLEET_MODULES; provisioned again if another module brought the fleet down or up in the meantime."""

    def __init__(self, sim: SimFleet):
        self.sim = sim
        self.first_run = None
        self.pids = None
        self.output = ""  # the first site.yml run's output

    def _pids(self):
        state = self.sim.load_state()
        return None if state is None else [n.pid1 for n in state.nodes]

    def ensure(self):
        from dapo_sim.fleet import FleetSpec

        from .ansible_helpers import playbook
        from .helpers import hosts, sh

        if self.first_run is not None and self.pids is not None and self._pids() == self.pids:
            return self.first_run
        self.sim.down()
        self.sim.up(FleetSpec(nodes=2, faults=("node2:firmware=7.5.0.1.129",)))
        nodes = hosts()
        boots = {name: json.loads(sh(h, "cat /dev/.dapo-sim/hw.json").stdout)["boots"] for name, h in nodes.items()}
        rc, output, recap = playbook()
        assert rc == 0, output[-3000:]
        self.first_run, self.pids, self.output = (nodes, boots, recap), self._pids(), output
        return self.first_run


@pytest.fixture(scope="session")
def site_fleet(sim) -> SiteFleet:
    return SiteFleet(sim)


@pytest.fixture(scope="session", autouse=True)
def _leave_two_clean_nodes(request):
    """After the integration tests, leave the default 2-node fleet up (as .ci/run and the README expect); not in a
    group of tests/integration/groups.py, whose fleet ends with the group's namespaces."""
    yield
    if os.environ.get("DAPO_OPS_SIM_GROUP"):
        return
    if _missing() is None and any("integration" in str(i.fspath) for i in request.session.items):
        from dapo_sim.fleet import FleetSpec

        fleet = SimFleet()
        fleet.down()   # a fleet of the same shape the tests changed (an installer run by hand) is not a clean one
        fleet.up(FleetSpec(nodes=2))


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    """A module's launch run records go to a temporary directory, not the checkout's runs/."""
    path = tmp_path_factory.mktemp("runs")
    previous = os.environ.get("DAPO_OPS_RUNS_DIR")
    os.environ["DAPO_OPS_RUNS_DIR"] = str(path)
    yield path
    if previous is None:
        del os.environ["DAPO_OPS_RUNS_DIR"]
    else:
        os.environ["DAPO_OPS_RUNS_DIR"] = previous
