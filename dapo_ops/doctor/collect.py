"""`dapo-ops doctor RUN`: collect a run's evidence from its nodes into runs/launch/<run>/doctor/ (bundle.py's layout).

Per node, over SSH (host keys verified, dapo_ops.fleet.ssh): Ray's session logs, CANN plogs, `dmesg`, the node's
clock (zone, skew against the controller, boot time) in one tar file fetched over SFTP; from the head, the job's
console (`ray job logs`, as `dapo-ops logs` reads it); then a fresh audit of the run's nodes (health, HBM, links),
saved beside the logs. Everything but the SSH edge is pure and unit-tested.
"""

from __future__ import annotations

import json
import shutil
import shlex
import tarfile
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from dapo_ops.doctor.bundle import BUNDLE_FILE, BUNDLE_SCHEMA
from dapo_ops.errors import DapoError, UsageError
from dapo_ops.job.render import RAY_TEMP_DIR

RAY_LOGS = f"{RAY_TEMP_DIR}/session_latest/logs"
PLOG_ROOTS = ("${ASCEND_PROCESS_LOG_PATH:-}", "/root/ascend/log", "${HOME}/ascend/log")
PLOG_MAX_BYTES = 20 * 1024 * 1024       # the last 20 MiB of each plog: the end is where a run dies
NODE_TIMEOUT = 300.0


def remote_script(minutes: int) -> str:
    """The shell run on each node: stage the logs of the last `minutes` in a private temp dir, tar them, print the
    tar's path. Reads only; the staging dir is removed before it exits. The logs are root's: the stage and the tar
    are private (umask 077), and no symbolic link among them is followed or kept (a link in a log directory could
    name any file on the node)."""
    plog_roots = " ".join(f'"{root}"' for root in PLOG_ROOTS)
    return f"""set -u
umask 077
stage=$(mktemp -d /tmp/dapo-doctor.XXXXXX) || exit 1
mkdir -p "$stage/ray" "$stage/plog"
if [ -d {shlex.quote(RAY_LOGS)} ]; then cp -rP {shlex.quote(RAY_LOGS)}/. "$stage/ray/" 2>/dev/null || true; fi
find "$stage/ray" -type l -delete 2>/dev/null || true
for root in {plog_roots}; do
  [ -n "$root" ] && [ -d "$root" ] || continue
  find "$root" -type f -name '*.log' -mmin -{int(minutes)} 2>/dev/null | while read -r f; do
    dest="$stage/plog/$(echo "$f" | tr / _)"
    tail -c {PLOG_MAX_BYTES} "$f" > "$dest" 2>/dev/null || true
  done
done
dmesg > "$stage/dmesg.txt" 2>&1 || true
printf '{{"utc_offset": "%s", "btime": %s}}\\n' "$(date +%z)" "$(awk '/^btime/ {{print $2}}' /proc/stat)" \\
  > "$stage/node.json"
tar czf "$stage.tgz" -C "$stage" . && rm -rf "$stage" && echo "$stage.tgz"
"""


def node_meta(node: dict, *, address: str | None, npus: int | None, skew_s: float) -> dict:
    """bundle.json's entry for a node, from what its script printed (zone, boot time) and the measured skew."""
    meta = {"address": address, "npus": npus, "utc_offset": node.get("utc_offset") or "+0000",
            "skew_s": round(skew_s, 3)}
    if node.get("btime"):
        meta["boot_time"] = datetime.fromtimestamp(int(node["btime"]), timezone.utc).isoformat()
    return meta


def skew(before: float, node_now: float, after: float) -> float:
    """Node clock minus controller clock, taking the node's reading as the middle of the round trip."""
    return node_now - (before + after) / 2


def bundle_description(run: str, nodes: dict[str, dict], problems: dict[str, str]) -> dict:
    return {"schema": BUNDLE_SCHEMA, "run": run, "collected": datetime.now(timezone.utc).isoformat(),
            "nodes": nodes, "problems": problems}


def extract(archive: Path, into: Path) -> None:
    """Unpack a node's tar below its own directory only (tarfile's data filter refuses links and paths out)."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")


def _collect_node(host, bundle: Path, minutes: int) -> dict:
    from dapo_ops.fleet.ssh import connect, run
    from dapo_ops.fleet.transfer import read_file

    conn = connect(host)
    try:
        before = time.time()
        sample = run(conn, host, "date +%s.%N", 30)
        after = time.time()
        node_now = float(sample.raise_for("read the clock"))
        result = run(conn, host, remote_script(minutes), NODE_TIMEOUT)
        remote = result.raise_for("collect the logs").strip().splitlines()[-1]
        local = bundle / f".{host.name}.tgz"
        local.write_bytes(read_file(conn, host, remote, NODE_TIMEOUT))
        run(conn, host, f"rm -f {shlex.quote(remote)}", 30)
    finally:
        conn.close()
    extract(local, bundle / host.name)
    local.unlink()
    node_file = bundle / host.name / "node.json"
    node = json.loads(node_file.read_text()) if node_file.exists() else {}
    node_file.unlink(missing_ok=True)
    return {"node": node, "skew_s": skew(before, node_now, after)}


def _console(record, head, bundle: Path) -> None:
    from dapo_ops.launch.cluster import job_logs

    from dapo_ops.launch.archive import console_path

    path = bundle / record.head / "console.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as stream:
        exit_code = job_logs(head, head.layout.ray, record.dashboard, record.token_file, record.submission_id,
                             False, stream)
    if exit_code != 0 and console_path(record).is_file():   # Ray is gone: the copy kept when the run ended
        shutil.copyfile(console_path(record), path)


def _audit(hosts, bundle: Path) -> None:
    from dapo_ops.audit import collect as audit_collect
    from dapo_ops.audit.analyze import analyze
    from dapo_ops.audit.model import Thresholds
    from dapo_ops.manifest import load_manifest

    manifest = load_manifest()
    raws, interrupted = audit_collect.collect(hosts, lambda h: h.npus, manifest.platform["install_path"], 120, len(hosts))
    audit_collect.write_bundle(bundle / "audit", raws)
    report = analyze(raws, manifest, Thresholds(), interrupted)
    findings = [asdict(f) for f in report.findings if f.severity in ("error", "warning")]
    (bundle / "audit.json").write_text(json.dumps({"findings": findings}, indent=2) + "\n")


def _npus(host) -> int | None:
    try:
        return host.npus
    except DapoError:
        return None


def collect_run(record, bundle: Path, inventory: Path | None = None, minutes: int = 24 * 60) -> None:
    """Every node of the run into the bundle; a node that cannot be read is named in bundle.json's problems."""
    from dapo_ops.fleet.ssh import fan_out
    from dapo_ops.inventory import load_inventory
    from dapo_ops.launch.records import run_inventory

    by_name = {h.name: h for h in load_inventory(run_inventory(record, inventory)).hosts}
    missing = [n for n in record.nodes if n not in by_name]
    if missing:
        raise UsageError(f"run {record.run_id}'s nodes are not in the inventory: {', '.join(missing)}")
    hosts = [by_name[n] for n in record.nodes]
    bundle.mkdir(parents=True, exist_ok=True)
    bundle.chmod(0o700)                  # root's logs from every node: the controller's user only

    def work(host):
        try:
            return _collect_node(host, bundle, minutes)
        except (DapoError, OSError, ValueError, tarfile.TarError) as exc:
            return {"problem": f"{host.name}: {exc}"}

    results = fan_out(hosts, work, max_workers=len(hosts)).results
    nodes, problems = {}, {}
    for host in hosts:
        got = results.get(host.name) or {"problem": f"{host.name}: no answer"}
        if "problem" in got:
            problems[host.name] = got["problem"]
            continue
        nodes[host.name] = node_meta(got["node"], address=record.addresses.get(host.name, host.address),
                                     npus=_npus(host), skew_s=got["skew_s"])
    for step, call in (("console", lambda: record.submission_id and _console(record, by_name[record.head], bundle)),
                       ("audit", lambda: _audit(hosts, bundle))):
        try:
            call()
        except (DapoError, OSError) as exc:
            problems[step] = str(exc)
    (bundle / BUNDLE_FILE).write_text(json.dumps(bundle_description(record.run_id, nodes, problems), indent=2) + "\n")
