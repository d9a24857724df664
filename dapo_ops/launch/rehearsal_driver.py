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
One job in one file (with rehearsal_tcp.py and node_files.py beside it): the rank actor and the phases that drive it are shipped
and run together on the head, so they stay together although that makes the file longer than most.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

try:
    import node_files  # on the head: pushed next to this file
    import rehearsal_tcp
except ImportError:  # imported as dapo_ops.launch.rehearsal_driver (the unit tests)
    from dapo_ops.job import node_files
    from dapo_ops.launch import rehearsal_tcp

Mailbox, bound_socket, chunk, interface_address, send_all = (
    rehearsal_tcp.Mailbox, rehearsal_tcp.bound_socket, rehearsal_tcp.chunk, rehearsal_tcp.interface_address,
    rehearsal_tcp.send_all)

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
            problems += node_files.file_problems(self.config.get("required_files", {}),
                                                      self.config.get("model_dir"))
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
                self.mailbox = Mailbox(address, self.config["ray_ports"])
                return [address, self.mailbox.port]
            with bound_socket(address, self.config["ray_ports"]) as probe:  # torch's rendezvous port (rank 0's)
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
                # the job's own values (an hour) would outlast the rehearsal: HCCL gets the rehearsal's, and the
                # rehearsal's deadline (collective_timeout) runs past HCCL's report (that + 20 s), so HCCL says why
                bound = int(self.config.get("hccl_connect_timeout") or self.config["collective_timeout"])
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


class Failed(Exception):
    """A phase failed: the failures are the result event's."""

    def __init__(self, failures: list[dict]):
        super().__init__(f"{len(failures)} failure(s)")
        self.failures = failures


def _placement_failure(error: str) -> Failed:
    return Failed([{"phase": "placement", "rank": None, "host": None, "error": error}])


class Rehearsal:
    """One rehearsal on the running Ray cluster, phase by phase; a phase that fails raises Failed."""

    def __init__(self, ray, config: dict):
        self.ray, self.config = ray, config
        self.nodes, self.npus = config["nodes"], config["npus_per_node"]
        self.world = len(self.nodes) * self.npus
        self.started = time.monotonic()
        self.actors: list = []
        self.where: list[dict] = []   # rank -> its node

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def reserve(self) -> dict:
        """One STRICT_PACK placement group of one-NPU bundles per node, like verl's resource pool; node ip -> group."""
        from ray.util.placement_group import placement_group, placement_group_table

        ray, npus, timeout = self.ray, self.npus, self.config["placement_timeout"]
        ip_to_node = {n["ip"]: n for n in self.nodes}
        groups = [placement_group([{"NPU": 1}] * npus, strategy="STRICT_PACK", name=f"dapo-rehearsal-{i}")
                  for i in range(len(self.nodes))]
        ready, _ = ray.wait([g.ready() for g in groups], num_returns=len(groups), timeout=timeout)
        if len(ready) != len(groups):
            raise _placement_failure(f"only {len(ready)} of {len(groups)} per-node placement groups of {npus} NPU "
                                     f"could be placed in {timeout} s")
        node_ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
        placed_on = [node_ips.get(next(iter(placement_group_table(g)["bundles_to_node_id"].values())))
                     for g in groups]
        if sorted(placed_on, key=str) != sorted(ip_to_node):
            raise _placement_failure(f"placement groups landed on {placed_on}, expected one on each of "
                                     f"{sorted(ip_to_node)}")
        emit("reserved", bundles=self.world, nodes=[ip_to_node[ip]["name"] for ip in placed_on],
             seconds=self.elapsed())
        return dict(zip(placed_on, groups))

    def start_ranks(self, by_ip: dict) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        rank_class = build_actor_class(self.ray)
        for node in self.nodes:  # ranks follow the inventory order: the head's NPUs are ranks 0..n-1
            for bundle in range(self.npus):
                strategy = PlacementGroupSchedulingStrategy(placement_group=by_ip[node["ip"]],
                                                            placement_group_bundle_index=bundle)
                self.actors.append(rank_class.options(resources={"NPU": 1}, scheduling_strategy=strategy)
                                   .remote(len(self.actors), self.world, node, self.config))
                self.where.append(node)

    def failure(self, phase: str, rank: int, error: str, waited: bool) -> dict:
        return {"phase": phase, "rank": rank, "host": self.where[rank]["name"], "error": error, "waited": waited}

    def gather(self, refs: list, phase: str, timeout: float) -> list:
        """Every rank's answer; the ranks that raised or did not answer in time raise Failed, by cause."""
        results, failures = self._gather(refs, phase, timeout)
        if failures:
            raise Failed(by_cause(failures))
        return results

    def _gather(self, refs: list, phase: str, timeout: float) -> tuple[list, list[dict]]:
        from ray.exceptions import GetTimeoutError, RayError

        results, failures = [None] * len(refs), []
        done, pending = self.ray.wait(refs, num_returns=len(refs), timeout=timeout)
        index = {ref: i for i, ref in enumerate(refs)}
        for ref in done:
            try:
                results[index[ref]] = self.ray.get(ref)
            except (RayError, GetTimeoutError) as exc:
                message = str(exc).strip().splitlines()
                # Ray re-raises a task's exception as an instance of its class too: TimeoutError is a rank that
                # waited for a peer (Mailbox.wait_for, a socket timeout), not one that broke
                failures.append(self.failure(phase, index[ref], message[-1] if message else type(exc).__name__,
                                             isinstance(exc, (TimeoutError, GetTimeoutError))))
        failures += [self.failure(phase, index[ref], f"no answer within {timeout:.0f} s", True) for ref in pending]
        return results, failures

    def place(self) -> None:
        ready_at = time.monotonic()
        answers = self.gather([a.ready.remote() for a in self.actors], "placement", self.config["placement_timeout"])
        hosts: dict[str, int] = {}
        for answer in answers:
            hosts[answer["hostname"]] = hosts.get(answer["hostname"], 0) + 1
        emit("placed", ranks=self.world, hosts=hosts, seconds=self.elapsed(),
             actors_seconds=round(time.monotonic() - ready_at, 3))

    def check(self) -> list[dict]:
        checks, failures = self._gather([a.check.remote() for a in self.actors], "check", self.config["check_timeout"])
        failures += [self.failure("check", check["rank"], problem, False)
                     for check in checks for problem in (check or {}).get("problems", [])]
        if failures:
            raise Failed(by_cause(failures))
        emit("checked", ranks=self.world, seconds=self.elapsed())
        return checks

    def collectives(self, checks: list[dict]) -> None:
        sp = self.config["sp_size"]
        sp_groups = [list(range(start, start + sp)) for start in range(0, self.world, sp)]
        endpoints = self.gather([a.endpoint.remote() for a in self.actors], "collective", self.config["check_timeout"])
        timings = self.gather([a.collectives.remote(endpoints, sp_groups) for a in self.actors], "collective",
                              self.config["collective_timeout"] + 15)
        per_rank = [{"rank": c["rank"], "host": self.where[c["rank"]]["name"], "device": c["device"], "pid": c["pid"],
                     "timings": {k: round(v, 4) for k, v in t["timings"].items()}} for c, t in zip(checks, timings)]
        emit("result", ok=True, backend=self.config["backend"], per_rank=per_rank, sp_groups=len(sp_groups),
             seconds=self.elapsed())


def rehearse(config: dict) -> bool:
    import ray

    # the rank actors run on other nodes, where rehearsal_tcp is not importable: ship it with the actor class
    ray.cloudpickle.register_pickle_by_value(rehearsal_tcp)
    ray.cloudpickle.register_pickle_by_value(node_files)
    rehearsal = Rehearsal(ray, config)
    ray.init(address=config["gcs_address"], logging_level="ERROR", log_to_driver=False)
    emit("placing", ranks=rehearsal.world, nodes=len(rehearsal.nodes))
    try:
        rehearsal.start_ranks(rehearsal.reserve())
        rehearsal.place()
        rehearsal.collectives(rehearsal.check())
    except Failed as failed:
        emit("result", ok=False, failures=failed.failures)
        return False
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
