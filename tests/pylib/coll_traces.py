"""Small traces holding collectives the way PyTorch's recorders leave them, for the tests of
`etr chakra`, `etr summary` and `etr replay` (docs/FORMAT.md, "Collectives in a trace").

Each scenario is a function returning the trace's node list for one rank; write() makes the
file. Ids are drawn in start order, as etr and PyTorch draw them, and every child is written
before its parent. What each scenario expects is said next to it and checked by the tests.

A test finds this module through its own path (tests/pylib), not through PYTHONPATH.
"""
import json

from etr_checks import PROCESS, THREAD  # noqa: F401 (also for the tests that import them from here)


def tensor(tid, sid, numel, item=4):
    return [tid, sid, 0, numel, item, "cpu"]


def io(*vals):
    """inputs/outputs from (value, type) pairs (shapes and strides as PyTorch writes a
    scalar's: [] -- the tools do not read them here)."""
    return {"values": [v for v, _ in vals], "shapes": [[] for _ in vals],
            "types": [t for _, t in vals], "strides": [[] for _ in vals]}


def attrs(tid, extra=()):
    a = [("rf_id", "uint64", 0), ("fw_parent", "uint64", 0), ("seq_id", "int64", -1),
         ("scope", "uint64", 0), ("tid", "uint64", tid), ("fw_tid", "uint64", 0),
         ("op_schema", "string", ""), ("kernel_backend", "string", ""),
         ("kernel_file", "string", "")] + list(extra)
    return [{"name": n, "type": t, "value": v} for n, t, v in a]


def node(i, name, parent, tid, ts=None, dur=None, excl=None, inputs=None, outputs=None,
         extra=()):
    n = {"id": i, "name": name, "ctrl_deps": parent, "inputs": inputs or io(),
         "outputs": outputs or io()}
    if ts is not None:
        n["ts"], n["inclusive_dur"] = ts, dur
        n["exclusive_dur"] = dur if excl is None else excl
    n["attrs"] = attrs(tid, extra)
    return n


def thread(i, tid):
    return node(i, THREAD, 1, tid)


def write(path, nodes, schema="1.1.1-chakra.0.0.4", pg_init=None):
    """The trace file; pg_init (the group list) adds a `## process_group:init ##` node."""
    if pg_init is not None:
        nodes = [nodes[0], node(99999, "## process_group:init ##", nodes[0]["id"],
                                nodes[0]["attrs"][4]["value"],
                                inputs=io((json.dumps(pg_init), "String")))] + nodes[1:]
    d = {"schema": schema, "pid": 1, "time": "2026-01-01 00:00:00", "start_ts": 0,
         "nodes": nodes + [node(1, PROCESS, 1, 0)], "finish_ts": 1}
    with open(path, "w") as f:
        json.dump(d, f)


LIST_T = "GenericList[Tensor(float)]"


def c10d(i, op, parent, tid, ts, dur, args):
    """PyTorch's dispatcher op c10d::<op>; args as (value, type) pairs."""
    return node(i, "c10d::" + op, parent, tid, ts, dur, inputs=io(*args))


def gloo113(rank=0):
    """etr.torch with PyTorch 1.13 and gloo (coll.py of docs/FORMAT.md's example): each call
    is c10d::X_ on the calling thread (tid 1) and gloo:X on a gloo worker (tid 2 or 3);
    gloo:all_gather copies the gathered chunks inside its record. Expected: 4 COMM nodes,
    on the c10d ops (4, 8, 13, 16); the gloo records are no node; gloo:all_gather's
    children (11, 12) stay COMP nodes; all_gather's message is 100 floats (400 bytes)."""
    obj = ("<Object>", "Object")
    t5, t7, t9, t11 = (tensor(105, 106, 1000), tensor(107, 108, 100), tensor(109, 110, 100),
                       tensor(111, 112, 100))
    return [
        thread(2, 1), thread(20, 2), thread(30, 3),
        node(3, "aten::ones", 2, 1, 100, 10, outputs=io((t5, "Tensor(float)"))),
        c10d(4, "allreduce_", 2, 1, 120, 5, [([t5], LIST_T), obj, obj, (-1, "Int")]),
        node(5, "gloo:all_reduce", 20, 2, 122, 900, inputs=io((t5, "Tensor(float)"))),
        node(6, "aten::ones", 2, 1, 130, 4, outputs=io((t11, "Tensor(float)"))),
        c10d(8, "allgather_", 2, 1, 1100, 4,
             [([[t7, t9]], "GenericList[GenericList[Tensor(float),Tensor(float)]]"),
              ([t11], LIST_T), obj, (-1, "Int")]),
        node(11, "aten::copy_", 10, 3, 1400, 10,
             inputs=io((t7, "Tensor(float)"), (t11, "Tensor(float)"))),
        node(12, "aten::copy_", 10, 3, 1420, 10,
             inputs=io((t9, "Tensor(float)"), (t11, "Tensor(float)"))),
        node(10, "gloo:all_gather", 30, 3, 1102, 400, excl=380, inputs=io((t11, "Tensor(float)"))),
        c10d(13, "broadcast_", 2, 1, 1600, 3, [([t5], LIST_T), obj, (0, "Int"), (0, "Int"),
                                                 (-1, "Int")]),
        node(14, "gloo:broadcast", 20, 2, 1601, 300, inputs=io((t5, "Tensor(float)"))),
        node(15, "aten::add", 2, 1, 2000, 20, inputs=io((t5, "Tensor(float)"))),
        c10d(16, "barrier", 2, 1, 2100, 2, [obj, ([], "GenericList[]"), (-1, "Int")]),
        node(17, "gloo:barrier", 30, 3, 2101, 200),
    ]


def torch113attrs(rank=0):
    """gloo113 as etr.torch records it now: each c10d op carries the collective attrs
    (collective_name, dtype, in/out_msg_nelems, pg_size, pg_name; the all-reduce in group
    "1"). Expected: the same 4 COMM nodes on the c10d ops, the gloo records no node (the
    c10d op's first input tensor pairs them: allgather_'s is its second argument's), the
    all-reduce in group "1", the others in "0", all_gather 400 bytes."""
    def coll(name, n_in, n_out, pg, dtype="Float"):
        return [("collective_name", "string", name), ("dtype", "string", dtype),
                ("in_msg_nelems", "uint64", n_in), ("out_msg_nelems", "uint64", n_out),
                ("pg_name", "string", pg), ("pg_size", "uint64", 2)]
    extra = {4: coll("allreduce", 1000, 1000, "1"), 8: coll("allgather", 100, 200, "0"),
             13: coll("broadcast", 1000, 1000, "0"), 16: coll("barrier", 0, 0, "0", "")}
    out = []
    for n in gloo113(rank):
        if n["id"] in extra:
            n["attrs"] += attrs(1, extra[n["id"]])[-6:]
        out.append(n)
    return out


def a2a113(rank=0):
    """gloo's all_to_all_single in PyTorch 1.13: a gloo:all_to_all record alone (no c10d op).
    Expected: it is the one COMM node, 1024 bytes."""
    return [
        thread(2, 1), thread(20, 2),
        node(3, "aten::ones", 2, 1, 100, 10, outputs=io((tensor(105, 106, 256), "Tensor(float)"))),
        node(4, "gloo:all_to_all", 20, 2, 120, 300,
             inputs=io((tensor(105, 106, 256), "Tensor(float)"))),
    ]


def pt2(rank=0):
    """PyTorch 2.x / etr's own collective info: record_param_comms with the collective attrs
    inside c10d::allreduce_, nccl:all_reduce inside it, and a 'wait' record. Expected: one COMM
    node, the record_param_comms (5), group "0", 4000 bytes; 'wait' (7) stays plain work."""
    t5 = tensor(105, 106, 1000)
    coll = [("collective_name", "string", "allreduce"), ("dtype", "string", "Float"),
            ("in_msg_nelems", "uint64", 1000), ("out_msg_nelems", "uint64", 1000),
            ("pg_name", "string", "0"), ("pg_desc", "string", "default_pg"),
            ("pg_size", "uint64", 2)]
    wait = [("collective_name", "string", "wait"), ("dtype", "string", "Byte"),
            ("in_msg_nelems", "uint64", 0), ("out_msg_nelems", "uint64", 0),
            ("pg_name", "string", ""), ("pg_size", "uint64", 1)]
    return [
        thread(2, 1),
        node(3, "aten::ones", 2, 1, 100, 10, outputs=io((t5, "Tensor(float)"))),
        node(6, "nccl:all_reduce", 5, 1, 125, 10, inputs=io((t5, "Tensor(float)"))),
        node(5, "record_param_comms", 4, 1, 122, 20, excl=10,
             inputs=io(([t5], LIST_T), (0, "Int"), (["0", "default_pg"], "Tuple[String,String]"),
                       (rank, "Int"), ("allreduce", "String")), extra=coll),
        node(4, "c10d::allreduce_", 2, 1, 120, 30, excl=10,
             inputs=io(([t5], LIST_T), ("<Object>", "Object"))),
        node(7, "record_param_comms", 2, 1, 200, 5,
             inputs=io((0, "Int"), (["", ""], "Tuple[String,String]"), (rank, "Int"),
                       ("wait", "String")), extra=wait),
    ]


def ptobs(rank=0):
    """PyTorch's own observer with gloo (1.x): gloo:X on the caller's tid, nested in the
    c10d op (call 1) or written after it as its sibling (call 2). Expected: 2 COMM nodes, on
    c10d::allreduce_ (3) and c10d::broadcast_ (5)."""
    t9 = tensor(109, 110, 10)
    return [
        thread(2, 1),
        node(4, "gloo:all_reduce", 3, 1, 101, 50, inputs=io((t9, "Tensor(float)"))),
        c10d(3, "allreduce_", 2, 1, 100, 60, [([t9], LIST_T), ("<Object>", "Object")]),
        c10d(5, "broadcast_", 2, 1, 200, 5, [([t9], LIST_T), ("<Object>", "Object")]),
        node(6, "gloo:broadcast", 2, 1, 206, 40, inputs=io((t9, "Tensor(float)"))),
    ]


def ddp113(rank=0):
    """Two all-reduces whose gloo records run while the other's c10d op is issued: a bucket's
    (tensor 50, no c10d op: DDP calling the process group itself) starts after the c10d op of
    the next one (tensor 60). Expected: 2 COMM nodes, gloo:all_reduce of tensor 50 (5) and
    c10d::allreduce_ (4); the other gloo record (6) is c10d::allreduce_'s twin."""
    t50, t60 = tensor(50, 51, 64), tensor(60, 61, 32)
    return [
        thread(2, 1), thread(20, 2),
        node(3, "aten::ones", 2, 1, 90, 5, outputs=io((t60, "Tensor(float)"))),
        c10d(4, "allreduce_", 2, 1, 100, 5, [([t60], LIST_T), ("<Object>", "Object")]),
        node(5, "gloo:all_reduce", 20, 2, 102, 30, inputs=io((t50, "Tensor(float)"))),
        node(6, "gloo:all_reduce", 20, 2, 140, 30, inputs=io((t60, "Tensor(float)"))),
    ]


def c10d_sizes(rank=0):
    """The out-of-place c10d ops, alone (as the root where it matters), each with its input
    message of the size said: reduce_scatter_ 200 bytes (the input list, 2 x 25 floats),
    gather_ 40, scatter_ 80 (the scatter list), alltoall_base_ 64, alltoall_ 48,
    _allgather_base_ 12, allreduce_coalesced_ 24 (both tensors); send 8, recv_ 16 (point to
    point: plain work for chakra)."""
    t = tensor
    lt, llt = LIST_T, "GenericList[GenericList[Tensor(float),Tensor(float)]]"
    obj = ("<Object>", "Object")
    return [
        thread(2, 1),
        c10d(3, "reduce_scatter_", 2, 1, 100, 5,
             [([t(200, 201, 25)], lt), ([[t(202, 203, 25), t(204, 205, 25)]], llt), obj]),
        c10d(4, "gather_", 2, 1, 110, 5,
             [([[t(206, 207, 10), t(208, 209, 10)]], llt), ([t(210, 211, 10)], lt), obj]),
        c10d(5, "scatter_", 2, 1, 120, 5,
             [([t(212, 213, 10)], lt), ([[t(214, 215, 10), t(216, 217, 10)]], llt), obj]),
        c10d(6, "alltoall_base_", 2, 1, 130, 5,
             [(t(218, 219, 32), "Tensor(float)"), (t(220, 221, 16), "Tensor(float)"), obj,
              ([], "GenericList[]"), ([], "GenericList[]")]),
        c10d(7, "alltoall_", 2, 1, 140, 5,
             [([t(222, 223, 6), t(224, 225, 6)], lt), ([t(226, 227, 6), t(228, 229, 6)], lt),
              obj]),
        c10d(8, "_allgather_base_", 2, 1, 150, 5,
             [(t(230, 231, 6), "Tensor(float)"), (t(232, 233, 3), "Tensor(float)"), obj]),
        c10d(9, "allreduce_coalesced_", 2, 1, 160, 5,
             [([t(234, 235, 2), t(236, 237, 4)], lt), obj]),
        c10d(10, "send", 2, 1, 170, 5, [([t(238, 239, 2)], lt), obj, (1, "Int"), (0, "Int")]),
        c10d(11, "recv_", 2, 1, 180, 5, [([t(240, 241, 4)], lt), obj, (1, "Int"), (0, "Int")]),
    ]


def p2p(rank=0):
    """An all-reduce, a send from rank 0 to rank 1 (rank 1's recv; other ranks take no
    part), an all-reduce. Expected: the two all-reduces matched across every rank; the
    send and the recv are no collective of the group (before: they shifted the order)."""
    obj = ("<Object>", "Object")
    t5 = tensor(105, 106, 4)
    ops = [thread(2, 1), node(3, "aten::ones", 2, 1, 100, 10, outputs=io((t5, "Tensor(float)"))),
           c10d(4, "allreduce_", 2, 1, 120, 5, [([t5], LIST_T), obj, obj, (-1, "Int")])]
    if rank == 0:
        ops.append(c10d(5, "send", 2, 1, 200, 5, [([t5], LIST_T), obj, (1, "Int"), (0, "Int")]))
    elif rank == 1:
        ops.append(c10d(5, "recv_", 2, 1, 200, 5, [([t5], LIST_T), obj, (0, "Int"), (0, "Int")]))
    ops.append(c10d(6, "allreduce_", 2, 1, 300, 5, [([t5], LIST_T), obj, obj, (-1, "Int")]))
    return ops


SCENARIOS = {"p2p": p2p, "gloo113": gloo113, "torch113attrs": torch113attrs, "a2a113": a2a113, "pt2": pt2, "ptobs": ptobs,
             "ddp113": ddp113, "c10d_sizes": c10d_sizes}
