"""The launch rehearsal, run on the Ray head as a Ray driver: `python rehearsal_driver.py rehearsal.json`.

This file is pushed to the head with the run's files and runs with the node's Python (the provisioned stack's Ray
and torch); it imports nothing from dapo-ops. It places one actor per NPU in placement groups shaped like verl's
resource pool (one STRICT_PACK group per node, one {"NPU": 1} bundle per NPU), checks every actor's host,
environment and device, then runs an all-reduce across all ranks and an all-to-all inside each Ulysses SP group.

Collective backends:
  hccl  torch.distributed with torch_npu on the NPU the actor was given (what verl uses on Ascend);
  gloo  torch.distributed on CPU tensors over GLOO_SOCKET_IFNAME;
  tcp   no torch at all: every rank opens a socket on GLOO_SOCKET_IFNAME's address and the same exchanges run as
        point-to-point messages (every pair of ranks talks, so a blocked port or a wrong interface shows up).

It prints one `DAPO-REHEARSAL {json}` line per event and exits 0 when every rank passed, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

try:
    import rehearsal_tcp  # on the head: pushed next to this file
except ImportError:  # imported as dapo_ops.launch.rehearsal_driver (the unit tests)
    from dapo_ops.launch import rehearsal_tcp

Mailbox, chunk, interface_address, send_all = (rehearsal_tcp.Mailbox, rehearsal_tcp.chunk,
                                                rehearsal_tcp.interface_address, rehearsal_tcp.send_all)

EVENT_PREFIX = "DAPO-REHEARSAL "


def emit(event: str, **fields) -> None:
    print(EVENT_PREFIX + json.dumps({"event": event, "time": time.time(), **fields}, sort_keys=True), flush=True)


def build_actor_class(ray):
    @ray.remote(num_cpus=0)
    class Rank:
        def __init__(self, rank: int, world: int, node: dict, config: dict):
            self.rank, self.world, self.node, self.config = rank, world, node, config
            self.mailbox: Mailbox | None = None
            self.device_index: int | None = None
            self.timings: dict[str, float] = {}

        def ready(self) -> dict:
            return {"pid": os.getpid(), "hostname": socket.gethostname(), "node_ip": ray.util.get_node_ip_address()}

        def check(self) -> dict:
            started = time.monotonic()
            problems = []
            node_ip = ray.util.get_node_ip_address()
            if node_ip != self.node["ip"]:
                problems.append(f"placed on {node_ip}, expected {self.node['name']} ({self.node['ip']})")
            for name in self.config["required_env"]:
                value = os.environ.get(name)
                if not value:
                    problems.append(f"{name} is not set (the CANN environment was not sourced)")
                elif not os.path.isdir(value):
                    problems.append(f"{name}={value} is not a directory")
            for path, what in self.config.get("required_files", {}).items():
                if not os.path.isfile(path):
                    problems.append(f"{path} is missing: {what} must be on every node")
            for name in ("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
                value = os.environ.get(name)
                if value != self.node["nic"]:
                    problems.append(f"{name}={value!r}, expected {self.node['nic']!r}")
            nic_address = interface_address(self.node["nic"])
            if nic_address is None:
                problems.append(f"interface {self.node['nic']} has no IPv4 address on {socket.gethostname()}")
            elif nic_address != self.node["ip"]:
                problems.append(f"interface {self.node['nic']} has {nic_address}, expected {self.node['ip']}")
            if os.environ.get("HCCL_IF_IP") != self.node["ip"]:
                problems.append(f"HCCL_IF_IP={os.environ.get('HCCL_IF_IP')!r}, expected {self.node['ip']!r} (the "
                                "address of the HCCL NIC)")
            ids = [str(i) for i in ray.get_runtime_context().get_accelerator_ids().get("NPU", [])]
            device = None
            if len(ids) != 1:
                problems.append(f"Ray gave this rank NPU ids {ids}, expected exactly one")
            else:
                # Ray's ids are the node's device ids; torch_npu counts within ASCEND_RT_VISIBLE_DEVICES, which is the
                # whole list (RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES) or just this id (Ray set it).
                physical = int(ids[0])
                visible = [v.strip() for v in os.environ.get("ASCEND_RT_VISIBLE_DEVICES", "").split(",") if v.strip()]
                self.device_index = visible.index(ids[0]) if ids[0] in visible else physical
                device = f"/dev/davinci{physical}"
                if not os.path.exists(device):
                    problems.append(f"{device} is missing (NPU {physical} not visible on this node)")
            self.timings["check"] = time.monotonic() - started
            return {"rank": self.rank, "node_ip": node_ip, "hostname": socket.gethostname(), "device": device,
                    "pid": os.getpid(), "problems": problems}

        def endpoint(self) -> list:
            address = interface_address(self.node["nic"]) or self.node["ip"]
            if self.config["backend"] == "tcp":
                self.mailbox = Mailbox(address)
                return [address, self.mailbox.port]
            with socket.socket() as probe:  # a free port for torch's TCP rendezvous (rank 0's is used)
                probe.bind((address, 0))
                return [address, probe.getsockname()[1]]

        def collectives(self, endpoints: list, groups: list[list[int]]) -> dict:
            deadline = time.monotonic() + self.config["collective_timeout"]
            group = next(g for g in groups if self.rank in g)
            if self.config["backend"] == "tcp":
                self._tcp(endpoints, group, deadline)
            else:
                self._torch(endpoints, groups, group)
            return {"rank": self.rank, "timings": self.timings}

        def _tcp(self, endpoints: list, group: list[int], deadline: float) -> None:
            peers = [r for r in range(self.world) if r != self.rank]
            started = time.monotonic()
            send_all({peer: str(self.rank + 1).encode() for peer in peers}, endpoints, self.rank, "all_reduce",
                     deadline)
            received = self.mailbox.wait_for("all_reduce", peers, deadline)
            total = self.rank + 1 + sum(int(v) for v in received.values())
            expected = self.world * (self.world + 1) // 2
            if total != expected:
                raise RuntimeError(f"all_reduce summed to {total}, expected {expected}")
            self.timings["all_reduce"] = time.monotonic() - started
            started = time.monotonic()
            mates = [r for r in group if r != self.rank]
            size = self.config["chunk_bytes"]
            send_all({peer: chunk(self.rank, peer, size) for peer in mates}, endpoints, self.rank, "all_to_all",
                     deadline)
            received = self.mailbox.wait_for("all_to_all", mates, deadline)
            for peer, payload in received.items():
                if payload != chunk(peer, self.rank, size):
                    raise RuntimeError(f"all_to_all: the chunk from rank {peer} is corrupt")
            self.timings["all_to_all"] = time.monotonic() - started

        def _torch(self, endpoints: list, groups: list[list[int]], group: list[int]) -> None:
            from datetime import timedelta

            import torch
            import torch.distributed as dist

            backend = self.config["backend"]
            for name in ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT"):
                # the job's own values (an hour) would outlast the rehearsal's deadline: a hang must fail in time
                bound = int(self.config["collective_timeout"])
                os.environ[name] = str(min(int(os.environ.get(name) or bound), bound))
            if backend == "hccl":
                import torch_npu  # noqa: F401  (registers the npu device and the hccl backend)

                torch.npu.set_device(self.device_index)
                device = torch.device("npu", self.device_index)
            else:
                device = torch.device("cpu")
            master, port = endpoints[0]
            started = time.monotonic()
            dist.init_process_group(backend, init_method=f"tcp://{master}:{port}", rank=self.rank,
                                    world_size=self.world, timeout=timedelta(seconds=self.config["collective_timeout"]))
            try:
                subgroups = [dist.new_group(ranks=g) for g in groups]  # every rank creates every group, in order
                mine = subgroups[groups.index(group)]
                self.timings["init"] = time.monotonic() - started
                started = time.monotonic()
                values = torch.full((self.config["chunk_bytes"] // 4,), float(self.rank + 1), device=device)
                dist.all_reduce(values)
                expected = float(self.world * (self.world + 1) // 2)
                if float(values[0].item()) != expected:
                    raise RuntimeError(f"all_reduce gave {values[0].item()}, expected {expected}")
                self.timings["all_reduce"] = time.monotonic() - started
                started = time.monotonic()
                size = len(group)
                position = group.index(self.rank)
                outgoing = torch.arange(size, dtype=torch.float32, device=device) + position * size
                incoming = torch.empty(size, dtype=torch.float32, device=device)
                dist.all_to_all_single(incoming, outgoing, group=mine)
                wanted = torch.arange(size, dtype=torch.float32, device=device) * size + position
                if not torch.equal(incoming, wanted):
                    raise RuntimeError(f"all_to_all gave {incoming.tolist()}, expected {wanted.tolist()}")
                self.timings["all_to_all"] = time.monotonic() - started
            finally:
                dist.destroy_process_group()

    return Rank


def by_cause(failures: list[dict]) -> list[dict]:
    """Failures in rank order, the ones that say what broke before those that only waited for another rank (a
    rank that waited in vain points at the one that broke, not at itself)."""
    return sorted(failures, key=lambda f: (bool(f.get("waited")), f["rank"] if f["rank"] is not None else -1))


def rehearse(config: dict) -> bool:
    import ray
    from ray.exceptions import GetTimeoutError, RayError
    from ray.util.placement_group import placement_group, placement_group_table
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    nodes, npus = config["nodes"], config["npus_per_node"]
    world = len(nodes) * npus
    started = time.monotonic()
    # the rank actors run on other nodes, where rehearsal_tcp is not importable: ship it with the actor class
    ray.cloudpickle.register_pickle_by_value(rehearsal_tcp)
    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    emit("placing", ranks=world, nodes=len(nodes))
    ip_to_node = {n["ip"]: n for n in nodes}
    groups = [placement_group([{"NPU": 1}] * npus, strategy="STRICT_PACK", name=f"dapo-rehearsal-{i}")
              for i in range(len(nodes))]
    ready, _ = ray.wait([g.ready() for g in groups], num_returns=len(groups), timeout=config["placement_timeout"])
    if len(ready) != len(groups):
        emit("result", ok=False, failures=[{"phase": "placement", "rank": None, "host": None,
                                            "error": f"only {len(ready)} of {len(groups)} per-node placement groups "
                                                     f"of {npus} NPU could be placed in {config['placement_timeout']} s"}])
        return False
    node_ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    placed_on = []
    for group in groups:
        node_id = next(iter(placement_group_table(group)["bundles_to_node_id"].values()))
        placed_on.append(node_ips.get(node_id))
    if sorted(placed_on, key=str) != sorted(ip_to_node):
        emit("result", ok=False, failures=[{"phase": "placement", "rank": None, "host": None,
                                            "error": f"placement groups landed on {placed_on}, expected one on each "
                                                     f"of {sorted(ip_to_node)}"}])
        return False
    emit("reserved", bundles=world, nodes=[ip_to_node[ip]["name"] for ip in placed_on],
         seconds=round(time.monotonic() - started, 3))
    by_ip = dict(zip(placed_on, groups))
    Rank = build_actor_class(ray)
    actors, where = [], []
    for node in nodes:  # ranks follow the inventory order: the head's NPUs are ranks 0..n-1
        for bundle in range(npus):
            rank = len(actors)
            strategy = PlacementGroupSchedulingStrategy(placement_group=by_ip[node["ip"]],
                                                        placement_group_bundle_index=bundle)
            actors.append(Rank.options(resources={"NPU": 1}, scheduling_strategy=strategy)
                          .remote(rank, world, node, config))
            where.append(node)

    def gather(refs, phase: str, timeout: float):
        """ray.get every rank's answer; the ranks that raised or did not answer in time become failures."""
        results, failures = [None] * len(refs), []
        done, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        index = {ref: i for i, ref in enumerate(refs)}
        for ref in done:
            try:
                results[index[ref]] = ray.get(ref)
            except (RayError, GetTimeoutError) as exc:
                message = str(exc).strip().splitlines()
                # Ray re-raises a task's exception as an instance of its class too: TimeoutError is a rank that
                # waited for a peer (Mailbox.wait_for, a socket timeout), not one that broke
                failures.append({"phase": phase, "rank": index[ref], "host": where[index[ref]]["name"],
                                 "error": message[-1] if message else type(exc).__name__,
                                 "waited": isinstance(exc, (TimeoutError, GetTimeoutError))})
        for ref in pending:
            failures.append({"phase": phase, "rank": index[ref], "host": where[index[ref]]["name"],
                             "error": f"no answer within {timeout:.0f} s", "waited": True})
        return results, by_cause(failures)

    ready_at = time.monotonic()
    answers, failures = gather([a.ready.remote() for a in actors], "placement", config["placement_timeout"])
    if failures:
        emit("result", ok=False, failures=failures)
        return False
    hosts: dict[str, int] = {}
    for answer in answers:
        hosts[answer["hostname"]] = hosts.get(answer["hostname"], 0) + 1
    emit("placed", ranks=world, hosts=hosts, seconds=round(time.monotonic() - started, 3),
         actors_seconds=round(time.monotonic() - ready_at, 3))

    checks, failures = gather([a.check.remote() for a in actors], "check", config["check_timeout"])
    for check in checks:
        for problem in (check or {}).get("problems", []):
            failures.append({"phase": "check", "rank": check["rank"], "host": where[check["rank"]]["name"],
                             "error": problem})
    if failures:
        emit("result", ok=False, failures=by_cause(failures))
        return False
    emit("checked", ranks=world, seconds=round(time.monotonic() - started, 3))

    sp = config["sp_size"]
    sp_groups = [list(range(start, start + sp)) for start in range(0, world, sp)]
    endpoints, failures = gather([a.endpoint.remote() for a in actors], "collective", config["check_timeout"])
    if not failures:
        timings, failures = gather([a.collectives.remote(endpoints, sp_groups) for a in actors], "collective",
                                   config["collective_timeout"] + 15)
    if failures:
        emit("result", ok=False, failures=failures)
        return False
    per_rank = [{"rank": c["rank"], "host": where[c["rank"]]["name"], "device": c["device"], "pid": c["pid"],
                 "timings": {k: round(v, 4) for k, v in t["timings"].items()}} for c, t in zip(checks, timings)]
    emit("result", ok=True, backend=config["backend"], per_rank=per_rank, sp_groups=len(sp_groups),
         seconds=round(time.monotonic() - started, 3))
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: rehearsal_driver.py rehearsal.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as handle:
        config = json.load(handle)
    try:
        return 0 if rehearse(config) else 1
    except Exception as exc:  # the controller reads the result event, not a traceback
        emit("result", ok=False, failures=[{"phase": "driver", "rank": None, "host": None,
                                            "error": f"{type(exc).__name__}: {exc}"}])
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
