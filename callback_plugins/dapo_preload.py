"""Load the filter, test and lookup plugins once, in ansible-playbook's own process, before it forks a worker for
each task and host.

Ansible runs each task on each host in a worker process forked from its main process, and loads the Jinja plugins
where a template first uses one: all the filter files at once (ansible/plugins/loader.py, Jinja2Loader.all), in the
worker, and again in the next. This project's filters import dapo_ops (the manifest and inventory checks they share
with the dapo-ops commands), so every such worker imported them anew: about half of the controller's 30 CPU-seconds
in a site.yml run that changes nothing on two nodes (docs/development.md). Loaded in the main process when the
playbook starts, before the first fork, they are inherited by the workers with the loaders' caches. It prints
nothing and changes no result (a filter file that fails to import fails the task that uses it, as before).
"""

from __future__ import annotations

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, lookup_loader, test_loader


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "dapo_preload"
    CALLBACK_NEEDS_ENABLED = False   # on for every playbook run from this project (ansible.cfg callback_plugins)

    def v2_playbook_on_start(self, playbook):
        for loader in (filter_loader, test_loader):
            for _ in loader.all():
                pass
        for _ in lookup_loader.all(class_only=True):
            pass
