"""Integration tests against the simulated fleet (root, network namespaces, sshd).

Without root or sshd these tests are skipped, except when DAPO_OPS_REQUIRE_SIM=1 (CI sets it), where a
missing prerequisite fails the run instead of passing it by skipping.
"""

import os
import shutil

import pytest

from dapo_ops.sim.fleet import SimFleet

pytestmark = pytest.mark.sim


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("ip", "unshare", "nsenter", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if not os.path.exists("/usr/sbin/sshd"):
        return "needs openssh-server"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _missing()
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.sim)
            if reason:
                if os.environ.get("DAPO_OPS_REQUIRE_SIM") == "1":
                    raise pytest.UsageError(f"DAPO_OPS_REQUIRE_SIM=1 but the simulated fleet {reason}")
                item.add_marker(pytest.mark.skip(reason=f"simulated fleet {reason}"))


@pytest.fixture(scope="session")
def sim() -> SimFleet:
    return SimFleet()


@pytest.fixture(scope="session", autouse=True)
def _leave_two_clean_nodes(request):
    """After the integration tests, leave the default 2-node fleet up (as .ci/run and the README expect)."""
    yield
    if _missing() is None and any("integration" in str(i.fspath) for i in request.session.items):
        from dapo_ops.sim.fleet import FleetSpec

        SimFleet().up(FleetSpec(nodes=2))


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
