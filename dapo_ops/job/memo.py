"""Composed configurations remembered within one process. Hydra takes about a second to compose verl's trainer
configuration; `launch` and the tests compose the same job more than once. A result is keyed by the overrides and
by every file under the config directories (path, size, modification time), so an edited file composes anew."""

from __future__ import annotations

import copy
import os
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Hashable

from dapo_ops.job.spec import SpecError


def fingerprint(*directories: Path) -> tuple:
    """Every file under the directories, with its size and modification time."""
    seen = []
    for directory in directories:
        for root, dirs, files in os.walk(directory):
            dirs.sort()
            for name in sorted(files):
                stat = os.stat(os.path.join(root, name))
                seen.append((os.path.join(root, name), stat.st_size, stat.st_mtime_ns))
    return tuple(seen)


class Memo:
    """At most `size` results, least recently used dropped first; a SpecError is remembered as the same error."""

    def __init__(self, size: int = 128):
        self.size = size
        self._results: OrderedDict[Hashable, tuple[bool, object]] = OrderedDict()

    def get(self, key: Hashable, compute: Callable[[], object]) -> object:
        if key not in self._results:
            try:
                self._results[key] = (True, compute())
            except SpecError as exc:
                self._results[key] = (False, str(exc))
            while len(self._results) > self.size:
                self._results.popitem(last=False)
        self._results.move_to_end(key)
        ok, value = self._results[key]
        if not ok:
            raise SpecError(value)
        return copy.deepcopy(value)
