"""What an audit finds: Finding, a HostReport per host, the AuditReport (and its JSON document), Thresholds."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

ERROR, WARNING, INFO = "error", "warning", "info"
REPORT_SCHEMA = "dapo-ops/audit/v1"
# the versions a host report lists (HostReport.components), in this order
COMPONENTS = ("driver", "firmware", "cann_toolkit", "cann_kernels", "cann_nnal", "python", "numpy", "torch",
              "torch_npu", "vllm", "vllm_ascend", "verl")


@dataclass(frozen=True)
class Thresholds:
    temp_c: int = 85            # warn above this NPU temperature
    hbm_used_mb: int = 8192     # warn when more HBM than this is already in use (idle is ~3.3 GB)


@dataclass(frozen=True)
class Finding:
    host: str
    npu: int | None
    severity: str
    code: str
    component: str
    message: str
    expected: str | None = None
    actual: str | None = None


@dataclass
class HostReport:
    host: str
    reachable: bool
    error: str | None
    components: dict[str, str | None] = field(default_factory=dict)
    npus: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    # the env's distributions against the lock of the host's platform (None: the env was not listed)
    closure: dict[str, Any] | None = None
    dists: dict[str, str] = field(default_factory=dict)
    notes: list[Finding] = field(default_factory=list)   # severity "info": neither errors nor warnings


@dataclass
class AuditReport:
    manifest: str
    hosts: list[HostReport]
    interrupted: bool = False

    @property
    def findings(self) -> list[Finding]:
        return [f for h in self.hosts for f in h.findings]

    @property
    def notes(self) -> list[Finding]:
        return [n for h in self.hosts for n in h.notes]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    def to_dict(self) -> dict:
        return {
            "schema": REPORT_SCHEMA,
            "manifest": self.manifest,
            "interrupted": self.interrupted,
            "summary": {"hosts": len(self.hosts), "reachable": sum(h.reachable for h in self.hosts),
                        "errors": len(self.errors), "warnings": len(self.warnings), "clean": not self.errors},
            "hosts": {h.host: {"reachable": h.reachable, "error": h.error, "components": h.components,
                               "npus": h.npus, "findings": [asdict(f) for f in h.findings],
                               "closure": h.closure, "notes": [asdict(n) for n in h.notes]} for h in self.hosts},
            "findings": [asdict(f) for f in self.findings],
            "notes": [asdict(n) for n in self.notes],
        }
