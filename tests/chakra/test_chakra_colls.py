#!/usr/bin/env python3
"""etr chakra on collectives as PyTorch's recorders leave them (tests/pylib/coll_traces.py):
one COMM_COLL node per collective call whichever records the call left (c10d:: dispatcher
op, gloo:/nccl: backend record on another thread, record_param_comms), the other records
neither COMM nor COMP nodes; decoded with check_et --dump (our protobuf-c reader).

Usage: test_chakra_colls.py ETR CHECK_ET WORKDIR
With ETR_ASTRA_RUN set to ASTRA-sim's run.sh (../shared/tools/astra-sim), the files of the
gloo scenario are also simulated there (skipped otherwise: the test needs no simulator).
Exit status: 0 pass, 1 fail.
"""
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "pylib"))
import coll_traces as ct  # noqa: E402
from etr_checks import check, finish  # noqa: E402

etr, check_et, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)


def convert(name, ranks=2, **kw):
    """Write the scenario for each rank, run etr chakra; (nodes of rank 0 by id, stderr)."""
    files = []
    for r in range(ranks):
        f = os.path.join(work, "%s-%d.json" % (name, r))
        ct.write(f, ct.SCENARIOS[name](r), **kw)
        files.append(f)
    out = os.path.join(work, name + "-et")
    p = subprocess.run([etr, "chakra"] + files + ["-o", out], capture_output=True, text=True,
                       env=dict(os.environ, ETR_PROGRESS="0"))
    if not check(p.returncode == 0, "%s: etr chakra exit %d: %s" % (name, p.returncode, p.stderr)):
        return {}, p.stderr
    ets = [os.path.join(out, "rank.%d.et" % r) for r in range(ranks)]
    d = subprocess.run([check_et, "--dump", "--same-colls"] + ets, capture_output=True, text=True)
    check(d.returncode == 0, "%s: check_et: %s" % (name, d.stdout[-800:]))
    nodes = {}
    for line in d.stdout.splitlines():  # rank 0's nodes come first, then its summary line
        if line.startswith(ets[0] + ":"):
            break
        f = line.split()
        if f and f[0] == "node":
            kv = dict(x.split("=", 1) for x in f[4:] if "=" in x)
            kv["type"], kv["name"] = f[2], f[3]
            nodes[int(f[1])] = kv
    return nodes, p.stderr


def deps(nodes, i):
    """The ids node i depends on (ctrl and data)."""
    n = nodes.get(i, {})
    return [int(d) for k in ("ctrl", "data") for d in n.get(k, "").split(",") if d]


def unordered(nodes):
    """Pairs (a, b) of COMM nodes of one group, a the previous one of b in id (start) order,
    where b does not depend on a, even through other nodes: ASTRA-sim pairs the ranks'
    collectives by the order they are issued, so without that dependency two ranks may issue
    them in different orders and wait for each other forever."""
    bad, last = [], {}
    for b in comm(nodes):
        a = last.get(nodes[b].get("pg"))
        if a is not None:
            seen, todo = set(), [b]
            while todo:
                for d in deps(nodes, todo.pop()):
                    if d not in seen:
                        seen.add(d)
                        todo.append(d)
            if a not in seen:
                bad.append((a, b))
        last[nodes[b].get("pg")] = b
    return bad


def a2a_worker(rank=0):
    """etr.torch with PyTorch 1.13 and gloo: an all_reduce (c10d op on the caller, tid 1;
    gloo:all_reduce on worker tid 2), then all_to_all_single, which 1.13 records as
    gloo:all_to_all alone on another worker (tid 3), then a barrier. Expected: 3 COMM nodes
    (5, 8, 9), all_to_all after the all-reduce and the barrier after all_to_all. Before,
    gloo:all_to_all depended only on the worker's view of its tensor (7), so ASTRA-sim issued
    it after the all-reduce on rank 0, whose view lasts 500 us, and before it on rank 1, whose
    all-reduce comes after 300 us more of work (4): the ranks' collectives were paired
    across types and they waited for each other forever."""
    t5, t7, obj = ct.tensor(105, 106, 256), ct.tensor(107, 106, 256), ("<Object>", "Object")
    work, view = (1, 500) if rank == 0 else (300, 1)
    return [
        ct.thread(2, 1), ct.thread(20, 2), ct.thread(30, 3),
        ct.node(3, "aten::ones", 2, 1, 100, 10, outputs=ct.io((t5, "Tensor(float)"))),
        ct.node(4, "aten::empty", 2, 1, 110, work),
        ct.c10d(5, "allreduce_", 2, 1, 420, 5, [([t5], ct.LIST_T), obj, obj, (-1, "Int")]),
        ct.node(6, "gloo:all_reduce", 20, 2, 422, 600, inputs=ct.io((t5, "Tensor(float)"))),
        ct.node(7, "aten::view", 30, 3, 430, view, inputs=ct.io((t5, "Tensor(float)")),
                outputs=ct.io((t7, "Tensor(float)"))),
        ct.node(8, "gloo:all_to_all", 30, 3, 1100, 300, inputs=ct.io((t7, "Tensor(float)"))),
        ct.c10d(9, "barrier", 2, 1, 1500, 2, [obj, ([], "GenericList[]"), (-1, "Int")]),
        ct.node(10, "gloo:barrier", 20, 2, 1501, 200),
    ]


ct.SCENARIOS = dict(ct.SCENARIOS, a2a_worker=a2a_worker)


def size(nodes, i):
    return int(nodes[i]["comm_size"]) if "comm_size" in nodes.get(i, {}) else None


def comm(nodes):
    return sorted(i for i, n in nodes.items() if n["type"] == "COMM_COLL")


def comp(nodes):
    return sorted(i for i, n in nodes.items() if n["type"] == "COMP")


# F1: one COMM node per call.
n, err = convert("gloo113")
check(comm(n) == [4, 8, 13, 16], "gloo113: COMM nodes %s, wanted the c10d ops [4, 8, 13, 16]"
      % comm(n))
check(not any(i in n for i in (5, 10, 14, 17)),
      "gloo113: a gloo record is a node: %s" % [(i, n[i]) for i in (5, 10, 14, 17) if i in n])
check(11 in comp(n) and 12 in comp(n), "gloo113: gloo:all_gather's copies are not COMP: %s"
      % comp(n))

# F3: collectives whose trace names no group go to group "0", and etr chakra says so, once
# per file with how many.
check(all(n[i].get("pg") == "0" for i in comm(n)), "gloo113: a COMM node not in group 0")
lines = [x for x in err.splitlines() if "name no process group" in x]
check(len(lines) == 2 and all("4 collective(s) name no process group" in x for x in lines) and
      "gloo113-0.json" in lines[0] and "gloo113-1.json" in lines[1],
      "gloo113: no one-line note per file that 4 collectives name no group: %r" % err)

# F2: a barrier is an all-reduce of one float (ASTRA-sim runs no BARRIER).
check(n.get(16, {}).get("comm_type") == "0" and size(n, 16) == 4,
      "gloo113: the barrier is %s, wanted an ALL_REDUCE (0) of 4 bytes" % n.get(16))
astra = os.environ.get("ETR_ASTRA_RUN")
if astra:
    a = subprocess.run([astra, os.path.join(work, "gloo113-et"), "rank", "2"],
                       capture_output=True, text=True)
    last = (a.stdout.strip().splitlines() or [""])[-1]
    check(a.returncode == 0 and last.startswith("astra: OK"), "ASTRA-sim on gloo113: " + last)
else:
    print("ETR_ASTRA_RUN not set: ASTRA-sim not run")

# F4: comm_size is the input message, from the argument that holds it.
check([size(n, i) for i in (4, 8, 13)] == [4000, 400, 4000],
      "gloo113: comm_size of all_reduce, all_gather, broadcast %s, wanted [4000, 400, 4000]"
      % [size(n, i) for i in (4, 8, 13)])
n, err = convert("c10d_sizes")
got = {n[i]["name"]: size(n, i) for i in comm(n)}
want = {"c10d::reduce_scatter_": 200, "c10d::gather_": 40, "c10d::scatter_": 80,
        "c10d::alltoall_base_": 64, "c10d::alltoall_": 48, "c10d::_allgather_base_": 12,
        "c10d::allreduce_coalesced_": 24}
check(got == want, "c10d_sizes: comm_size %s, wanted %s" % (got, want))
check(10 in comp(n) and 11 in comp(n), "c10d_sizes: send/recv are not plain work")
check("2 reduce, gather or scatter COMM_COLL node(s): ASTRA-sim" in err,
      "c10d_sizes: no note that ASTRA-sim runs no gather/scatter: %r" % err)

n, _ = convert("a2a113")
check(comm(n) == [4], "a2a113: COMM nodes %s, wanted gloo:all_to_all [4]" % comm(n))
check(size(n, 4) == 1024, "a2a113: comm_size %s, wanted 1024" % size(n, 4))

n, err = convert("pt2")
check(err == "", "pt2: etr chakra said %r" % err)
check(comm(n) == [5], "pt2: COMM nodes %s, wanted record_param_comms [5]" % comm(n))
check(size(n, 5) == 4000, "pt2: comm_size %s, wanted 4000" % size(n, 5))
check(6 not in n, "pt2: nccl:all_reduce inside the collective is a node")
check(7 in comp(n), "pt2: the 'wait' record is not plain work: %s" % comp(n))

n, _ = convert("ptobs")
check(comm(n) == [3, 5], "ptobs: COMM nodes %s, wanted the c10d ops [3, 5]" % comm(n))
check(4 not in n and 6 not in n, "ptobs: a gloo record is a node")

n, _ = convert("ddp113")
check(comm(n) == [4, 5], "ddp113: COMM nodes %s, wanted [4, 5]" % comm(n))
check(6 not in n, "ddp113: c10d::allreduce_'s gloo record is a node")

for name in ct.SCENARIOS:
    n, _ = convert(name)
    check(all(x.get("comm_type") != "9" for x in n.values()), name + ": a BARRIER node")
    check(unordered(n) == [], "%s: COMM nodes of one group not in order (previous, next): %s"
          % (name, unordered(n)))

# A collective recorded on a gloo worker alone waits for the group's previous collective.
n, _ = convert("a2a_worker")
check(comm(n) == [5, 8, 9], "a2a_worker: COMM nodes %s, wanted [5, 8, 9]" % comm(n))
if astra:
    a = subprocess.run([astra, os.path.join(work, "a2a_worker-et"), "rank", "2"],
                       capture_output=True, text=True)
    last = (a.stdout.strip().splitlines() or [""])[-1]
    check(a.returncode == 0 and last.startswith("astra: OK"), "ASTRA-sim on a2a_worker: " + last)

# etr.torch's c10d ops with the collective attrs: still one COMM node per call, the attrs'
# group and sizes (before: gloo:all_gather, whose first tensor is not allgather_'s first
# input, was not paired and counted a second time).
n, err = convert("torch113attrs")
check(comm(n) == [4, 8, 13, 16], "torch113attrs: COMM nodes %s, wanted [4, 8, 13, 16]" % comm(n))
check([n[i].get("pg") for i in comm(n)] == ["1", "0", "0", "0"] and size(n, 8) == 400,
      "torch113attrs: groups %s, all_gather %s bytes" % ([n[i].get("pg") for i in comm(n)],
                                                         size(n, 8)))
check("name no process group" not in err, "torch113attrs: said it lacks groups: %r" % err)

sys.exit(finish("chakra collectives: OK"))
