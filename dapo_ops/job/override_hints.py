"""Hints for an override key verl's configuration does not have (pure)."""

from __future__ import annotations

import difflib

# Keys verl moved between releases (docs/verl-dapo.md §3.1: the reward settings, verl PR #5255), both ways: a
# recipe written for another verl than the pinned one names the key the pinned verl has.
_MOVED = {"reward_model.reward_manager": "reward.reward_manager.name",
          **{f"reward_model.overlong_buffer.{k}": f"reward.reward_kwargs.overlong_buffer_cfg.{k}"
             for k in ("enable", "len", "penalty_factor")}}
MOVED_KEYS = {**_MOVED, **{new: old for old, new in _MOVED.items()}}


def override_hint(key: str, leaves: list[str]) -> str:
    """A hint for an override key verl's configuration does not have: where a known move put it, where the only
    key of the same name lives (a key moved to another parent), else the closest spelling."""
    moved = MOVED_KEYS.get(key.lstrip("+"))
    if moved in leaves:
        return f"; verl moved it: the pinned verl has {moved!r} (docs/verl-dapo.md §3.1)"
    name = key.rsplit(".", 1)[-1]
    same_name = [leaf for leaf in leaves if leaf.rsplit(".", 1)[-1] == name]
    if len(same_name) == 1:
        return f"; did you mean {same_name[0]!r}? (a key of that name lives there)"
    close = difflib.get_close_matches(key, leaves, n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""
