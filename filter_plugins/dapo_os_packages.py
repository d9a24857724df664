"""The os_packages and preflight roles' filters over the manifest's `os_packages` (dapo_ops.model.os_packages)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from dapo_ops.errors import ManifestError, ParseError
from dapo_ops.model import os_packages


def _packages(entries):
    try:
        return os_packages.parse_os_packages(entries, "the stack manifest")
    except ManifestError as exc:
        raise AnsibleFilterError(str(exc)) from None


def tools(entries, layers):
    """`stack.os_packages | dapo_os_package_tools(['hdk', 'launch'])`: command -> {deb, rpm} package names."""
    return os_packages.commands(_packages(entries), list(layers))


def query(entries) -> dict:
    """`stack.os_packages | dapo_os_package_query`: dapo_node_facts' arguments that read what the plan needs."""
    return {"deb": os_packages.DPKG_QUERY, "rpm": os_packages.RPM_QUERY,
            "header_paths": os_packages.kernel_header_paths(_packages(entries))}


def plan(facts, entries, layers=os_packages.LAYERS) -> dict:
    """`facts | dapo_os_packages_plan(stack.os_packages, layers)`, facts being dapo_node_facts' result with the
    query's commands: {format, kernel, missing: [the package names to install]}."""
    package_format = os_packages.package_format(facts["platform"]["os_like"])
    output = facts["outputs"][package_format]
    if output["rc"] != 0:
        raise AnsibleFilterError(f"cannot read the {package_format} package database: "
                                 f"{(output['stderr'] or output['stdout']).strip()[:200]}")
    try:
        names = os_packages.installed(output["stdout"], package_format)
    except ParseError as exc:
        raise AnsibleFilterError(str(exc)) from None
    missing = os_packages.plan(_packages(entries), package_format=package_format, kernel=facts["platform"]["kernel"],
                               installed_names=names, kernel_headers_found=facts["kernel_headers"] is not None,
                               layers=list(layers))
    return {"format": package_format, "kernel": facts["platform"]["kernel"], "missing": missing}


class FilterModule:
    def filters(self):
        return {"dapo_os_package_tools": tools, "dapo_os_package_query": query, "dapo_os_packages_plan": plan}
