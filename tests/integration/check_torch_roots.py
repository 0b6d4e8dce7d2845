#!/usr/bin/env python3
"""etr.torch, 2 gloo ranks: a rooted collective's record_param_comms holds the root's group
rank as its rank input (the 4th of PyTorch's inputs: tensors, seq, (pg_name, pg_desc), rank),
on every rank, as PyTorch 2.x records it (ProcessGroupNCCL: opts.rootRank). PARAM's comm
replay takes that input as the root (et_replay/comm/commsTraceParser.py); with each rank's own
rank there (etr.torch before), every rank was a root and the replay of a broadcast hung.
Each record_param_comms also has the message the collective wrote as its one output, as
PyTorch 2.x records outputTensors (an all-reduce's: its input tensors, in place); it had none.
A send's rank input is its destination's group rank and a recv's its source's (PyTorch's
dstRank / srcRank), which PARAM's comm replay takes as the peer; with the own rank there, the
replay sent to itself (gloo crashed).

Usage: check_torch_roots.py WORKDIR  (PYTHONPATH: the build's python/ folder)
Skips (exit 77) without torch, torch.distributed with gloo, or etr.torch.
"""
import json
import os
import socket
import subprocess
import sys

SKIP = 77


def rank_main(rank, out, port):
    import torch
    import torch.distributed as dist
    import etr.torch
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    with etr.torch.trace(out):
        x = torch.ones(8) * (rank + 1)
        dist.broadcast(x, src=1)
        dist.reduce(x, dst=1)
        outs = [torch.empty(8) for _ in range(2)] if rank == 1 else None
        dist.gather(x, outs, dst=1)
        dist.scatter(x, [torch.ones(8), torch.ones(8)] if rank == 1 else None, src=1)
        dist.all_reduce(x)
        if rank == 0:
            dist.send(x, dst=1)
        else:
            dist.recv(x, src=0)
    dist.destroy_process_group()


def main():
    if len(sys.argv) == 4:  # a rank
        rank_main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
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
    outs = [os.path.join(work, "roots-%d.json" % r) for r in range(2)]
    procs = [subprocess.Popen([sys.executable, __file__, str(r), outs[r], str(port)])
             for r in range(2)]
    if any(p.wait(timeout=120) != 0 for p in procs):
        print("FAIL: a rank failed")
        return 1
    fails = 0
    for r, f in enumerate(outs):
        seen = {}
        for n in json.load(open(f))["nodes"]:
            if n["name"] != "record_param_comms":
                continue
            v = n["inputs"]["values"]
            name, rank_in = v[4], v[3]
            seen[name] = rank_in
            out = n.get("outputs", {}).get("values", [])
            if len(out) != 1 or (name == "allreduce" and out != v[:1]):
                print("FAIL: rank %d: %s's record_param_comms outputs %r (inputs %r)"
                      % (r, name, out, v[:1]))
                fails += 1
        want = {"broadcast": 1, "reduce": 1, "gather": 1, "scatter": 1, "allreduce": r}
        want.update({"send": 1} if r == 0 else {"recv": 0})
        for name, w in want.items():
            if seen.get(name) != w:
                why = {"allreduce": "this rank", "send": "the destination", "recv": "the source"}
                print("FAIL: rank %d: %s's record_param_comms has rank input %r, wanted %d (%s)"
                      % (r, name, seen.get(name), w, why.get(name, "the root")))
                fails += 1
    if fails:
        return 1
    print("torch roots: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
