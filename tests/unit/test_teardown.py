"""What a run leaves on its nodes, removed (dapo_ops/launch/teardown.py): the shell run for real against a
temporary runs directory."""

import subprocess

from dapo_ops.launch import teardown


def test_a_launch_sweeps_dead_runs_private_files_and_keeps_its_own_and_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(teardown, "RUNS_ROOT", str(tmp_path))
    for run in ("dead-1", "this-run", "odd name"):
        (tmp_path / run).mkdir()
        for name in teardown.PRIVATE_NAMES + ("env.sh", "ray-start.sh"):
            (tmp_path / run / name).write_text("x")
    (tmp_path / "stray-file").write_text("x")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "ray-token").write_text("x")
    (tmp_path / "alias-of-this-run").symlink_to(tmp_path / "this-run")   # links are never followed
    (tmp_path / "link-out").symlink_to(outside)
    subprocess.run(["bash", "-c", teardown.sweep_dead_runs("this-run")], check=True)
    for run in ("dead-1", "odd name"):
        assert sorted(p.name for p in (tmp_path / run).iterdir()) == ["env.sh", "ray-start.sh"]
    assert {p.name for p in (tmp_path / "this-run").iterdir()} == set(teardown.PRIVATE_NAMES) | {"env.sh", "ray-start.sh"}
    assert (tmp_path / "stray-file").exists() and (outside / "ray-token").exists()
