"""What a run leaves on its nodes, removed (dapo_ops/launch/leftovers.py): the shell run for real against a
temporary runs directory."""

import subprocess

from dapo_ops.launch import leftovers as teardown


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


def _hosts(*names, **vars_):
    from dapo_ops.inventory import Host
    from pathlib import Path
    return [Host(name=n, address=f"10.0.0.{i}", known_hosts=Path("/dev/null"), vars=dict(vars_))
            for i, n in enumerate(names, 1)]


def test_one_teardown_releases_only_where_ray_stopped_and_names_the_rest(monkeypatch):
    from dapo_ops.launch import teardown as one
    released, asked = [], {}

    def fake_stop(hosts, ray, timeout, starters_of):
        asked.update(timeout=timeout, starters_of=starters_of, ray=ray)
        return {"node1": None, "node2": "node2: Ray still runs after `ray stop --force` (raylet)"}
    monkeypatch.setattr(one, "ray_stop", fake_stop)
    monkeypatch.setattr(one.locks, "release", lambda hosts, run_id: released.append(([h.name for h in hosts], run_id)))
    notes = []
    errors = one.tear_down(_hosts("node1", "node2"), "r1", "/var/lib/dapo-ops/runs/r1", 45, note=notes.append)
    assert errors == {"node2": "node2: Ray still runs after `ray stop --force` (raylet)"}
    assert released == [(["node1"], "r1")] and asked["timeout"] == 45
    assert asked["starters_of"] == "/var/lib/dapo-ops/runs/r1"
    assert notes == [f"{errors['node2']}: it stays locked and fenced"]
    assert one.left_on(errors, "r1") == (
        "Ray is still up on node2, which keep the run's lock, token and firewall table: "
        "node2: Ray still runs after `ray stop --force` (raylet); `dapo-ops stop r1` retries")


def test_an_interrupted_teardown_releases_nothing(monkeypatch):
    from dapo_ops.launch import teardown as one
    released = []

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(one, "ray_stop", interrupted)
    monkeypatch.setattr(one.locks, "release", lambda hosts, run_id: released.append([h.name for h in hosts]))
    try:
        one.tear_down(_hosts("node1"), "r1", "/d", 60)
    except KeyboardInterrupt:
        pass
    assert released == []   # no node is known stopped: lock, token and fence stay for `dapo-ops stop`


def test_the_teardown_timeout_is_the_inventorys_stop_step():
    from dapo_ops.launch import teardown as one
    assert one.stop_timeout(_hosts("node1")) == 60
    assert one.stop_timeout(_hosts("node1", dapo_launch_timeouts={"stop": 120})) == 120
