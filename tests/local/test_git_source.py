"""Issue 26 (low): roles/stack/tasks/git_source.yml, run by the real ansible-playbook on the controller against a
local git repository: a pinned tag is cloned without its submodules (a recursive clone would fetch from URLs the
pinned commit has not been checked against yet), and an inventory override of the pinned commit is warned about."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dapo_ops.paths import PROJECT_ROOT

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    stack: {sources: {demo: {repo: org/demo, ref: v1, commit: "%(commit)s"}}}
    stack_git_base_url: "file://%(base)s"
    stack_git_depth: 0
    stack_source_commits: %(overrides)s
  tasks:
    - ansible.builtin.include_role: {name: stack, tasks_from: git_source}
      vars: {stack_git_source: demo, stack_git_dest: "%(dest)s"}
"""


def git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                           "-c", "protocol.file.allow=always", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture()
def repo_with_a_submodule(tmp_path):
    sub, top = tmp_path / "sub", tmp_path / "base" / "org" / "demo.git"
    for path in (sub, top):
        path.mkdir(parents=True)
        git(path, "init", "-q", "-b", "main")
        (path / "README").write_text(path.name)
        git(path, "add", "README")
        git(path, "commit", "-q", "-m", "one")
    git(top, "submodule", "add", "-q", f"file://{sub}", "third_party/sub")
    git(top, "commit", "-q", "-m", "with a submodule")
    git(top, "tag", "v1")
    return tmp_path, git(top, "rev-parse", "HEAD")


def clone(tmp_path, commit, overrides):
    play = tmp_path / "play.yml"
    dest = tmp_path / "checkout"
    play.write_text(PLAY % {"commit": commit, "base": tmp_path / "base", "dest": dest,
                            "overrides": json.dumps(overrides)})
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(Path(PROJECT_ROOT, "ansible.cfg")), ANSIBLE_NOCOLOR="1")
    run = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(play)],
                         cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300, env=env)
    return run, dest


def test_a_pinned_tag_is_cloned_without_its_submodules(repo_with_a_submodule):
    tmp_path, commit = repo_with_a_submodule
    run, dest = clone(tmp_path, commit, {})
    assert run.returncode == 0, run.stdout[-2000:]
    assert (dest / "README").is_file() and (dest / ".gitmodules").is_file()
    assert list((dest / "third_party" / "sub").iterdir()) == []      # registered, never fetched
    assert "WARNING" not in run.stdout


def test_an_override_of_the_pinned_commit_is_warned_about_and_still_checked(repo_with_a_submodule):
    tmp_path, commit = repo_with_a_submodule
    run, _ = clone(tmp_path, "0" * 40, {"demo": commit})
    assert run.returncode == 0, run.stdout[-2000:]
    said = " ".join(run.stdout.split())
    assert f"WARNING: dapo_source_commits replaces the pinned commit of org/demo v1 ({'0' * 40}) with {commit}" in said
    wrong, _ = clone(tmp_path, commit, {"demo": "1" * 40})
    assert wrong.returncode != 0 and "the tag moved" in " ".join(wrong.stdout.split())
