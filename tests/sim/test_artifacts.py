"""The simulator's stand-in installers: deterministic, and the simulated inventory gives their digests (the manifest
holds the real files' digests where they are known, none of the stand-ins')."""
import pytest

from dapo_ops.manifest import load_manifest
from dapo_sim import artifacts


@pytest.fixture(scope="module")
def manifest():
    return load_manifest()


def test_the_simulated_inventory_gives_the_stand_ins_digests_and_the_manifest_none_of_them(manifest):
    given = artifacts.pinned_digests(manifest)   # what dapo_sim.access.write_digest_file records
    assert given == {key: artifacts.digest(artifacts.build(package))
                     for key, package in artifacts.pinned_packages(manifest).items()}
    assert set(given) == set(manifest.artifacts)
    assert set(given.values()).isdisjoint(a.sha256 for a in manifest.artifacts.values())


def test_build_is_deterministic(manifest):
    package = artifacts.pinned_packages(manifest)["driver"]
    assert artifacts.build(package) == artifacts.build(package)


def test_the_simulated_fleets_digest_file_is_a_sites(manifest, tmp_path):
    """Written in the format `dapo-ops stack artifacts DIR` writes, and read back by the product's own reader."""
    from dapo_ops.stack.artifacts import pinned_digests, read_digest_file
    from dapo_sim.access import write_digest_file

    recorded = read_digest_file(write_digest_file(tmp_path, manifest))
    assert pinned_digests(manifest, recorded) == artifacts.pinned_digests(manifest)
