"""The simulator's stand-in installers: deterministic, and the ones the manifest pins (its digests are the stand-ins'
until a site's real files are pinned)."""
import pytest

from dapo_ops.manifest import load_manifest
from dapo_sim import artifacts


@pytest.fixture(scope="module")
def manifest():
    return load_manifest()


def test_pinned_digests_match_the_built_installers(manifest):
    for key, package in artifacts.pinned_packages(manifest).items():
        actual = artifacts.digest(artifacts.build(package))
        assert actual == manifest.artifact(key).sha256, (
            f"{key}: manifest digest is stale; run `python -m dapo_sim.artifacts --update-manifest`")


def test_build_is_deterministic(manifest):
    package = artifacts.pinned_packages(manifest)["driver"]
    assert artifacts.build(package) == artifacts.build(package)
