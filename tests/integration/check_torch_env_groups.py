#!/usr/bin/env python3
"""etr.torch under ETR_TRACE (no trace block: libetr_torch attaches as it loads), 3 gloo
ranks, a sub-group [0, 1] made by new_group: the trace names the process groups as a block
would. Each record_param_comms names its group (the world "0", the sub-group "1"), and the
first `## process_group:init ##` node in file order (the one PARAM's comm replay reads)
lists the sub-group with its members and the gloo backend. Before, nothing declared
torch.distributed's groups in this mode: the sub-group's collectives had pg_name "", PARAM
replayed them on the world and hung (rank 2 never joins them), and etr chakra put them in
group "0" (ASTRA-sim waits on them for ever).

Usage: check_torch_env_groups.py WORKDIR  (PYTHONPATH: the build's python/ folder)
Skips (exit 77) without torch, torch.distributed with gloo, or etr.torch.
"""
import json
import os
import socket
import subprocess
import sys

SKIP = 77
WORLD = 3


def rank_main():
    import torch
    import torch.distributed as dist
    import etr.torch  # noqa: F401  (attaches: ETR_TRACE is set)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    g = dist.new_group([0, 1])
    x = torch.ones(8) * (rank + 1)
    for _ in range(2):
        dist.all_reduce(x)
        if rank < 2:
            dist.all_reduce(x, group=g)
        dist.broadcast(x, src=0)
    dist.destroy_process_group()


def check(path, rank):
    fails = []
    with open(path) as f:
        nodes = json.load(f)["nodes"]
    pg = [n for n in nodes if n["name"] == "## process_group:init ##"]
    if not pg:
        return ["no process_group:init node"]
    groups = {g["pg_name"]: g for g in json.loads(pg[0]["inputs"]["values"][0])}
    want = {"0": ([0, 1, 2], True), "1": ([0, 1], rank < 2)}
    for name, (ranks, listed) in want.items():
        g = groups.get(name)
        if not listed:
            if g is not None:
                fails.append("group %r listed on a rank not in it: %r" % (name, g))
            continue
        if g is None:
            fails.append("the first process_group:init node lacks group %r: %r"
                         % (name, sorted(groups)))
        elif g["ranks"] not in (ranks, []) or g["group_size"] != len(ranks) \
                or g["backend_config"] != "cpu:gloo":
            fails.append("group %r is %r, wanted ranks %r, cpu:gloo" % (name, g, ranks))
    got = []
    for n in nodes:
        if n["name"] == "record_param_comms":
            a = {x["name"]: x["value"] for x in n["attrs"]}
            got.append((a.get("collective_name"), a.get("pg_name")))
    sub = [("allreduce", "1")] if rank < 2 else []
    wanted = ([("allreduce", "0")] + sub + [("broadcast", "0")]) * 2
    if got != wanted:
        fails.append("collectives (name, pg_name) %r, wanted %r" % (got, wanted))
    return fails


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--rank":
        rank_main()
        return 0
    work = sys.argv[1]
    try:
        import torch.distributed as dist
        import etr.torch  # noqa: F401
        if not dist.is_available() or not dist.is_gloo_available():
            raise ImportError("no gloo")
    except Exception as e:  # noqa: BLE001
        print("skipped: %s" % e)
        return SKIP
    os.makedirs(work, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    outs = [os.path.join(work, "env-groups-%d.json" % r) for r in range(WORLD)]
    for f in outs:
        if os.path.exists(f):
            os.remove(f)
    procs = []
    for r in range(WORLD):
        env = dict(os.environ, ETR_TRACE=os.path.join(work, "env-groups-%r.json"), RANK=str(r),
                   WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.pop("ETR_TRACE_TORCH", None)
        procs.append(subprocess.Popen([sys.executable, __file__, "--rank"], env=env))
    if any(p.wait(timeout=120) != 0 for p in procs):
        print("FAIL: a rank failed")
        return 1
    fails = 0
    for r, f in enumerate(outs):
        for msg in check(f, r):
            print("FAIL: rank %d: %s" % (r, msg))
            fails += 1
    if fails:
        return 1
    print("torch env groups: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
