#!/usr/bin/env python3
"""Strict check of an execution trace written by etr-example-runtime (examples/minitensor.c).

How it is run (the ctest entry is wired by the lead; this script registers nothing):

    etr-example-runtime --out trace.json --threads 2 --iters 3
    python3 tests/integration/check_example_trace.py trace.json --threads 2 --iters 3

    # environment activation works the same way:
    ETR_TRACE=trace.json etr-example-runtime --threads 2
    python3 tests/integration/check_example_trace.py trace.json --threads 2

Arguments:
    TRACE            the trace file (JSON)
    --threads N      worker threads the runtime ran (default 2, the runtime's default)
    --iters N        training steps per worker; when given, op counts are checked exactly
    --schema V       1.1.0 or 1.1.1: the schema the file must have (default: either, and
                     "strides" is then required or forbidden according to the file's schema)
    --no-timing      the trace was written without timing (ts/inclusive_dur/exclusive_dur)

Exit status: 0 when every check passes; 1 with a list of the failures; 2 when the file
cannot be read or is not valid JSON, or on bad arguments.

The trace is parsed with Python's json module (independent of etr's own reader); only the
standard library is used. The checks follow docs/FORMAT.md and what the runtime does:
file and node key order, the nine base attrs on every node, ids, the ctrl_deps tree, value
types against their type strings, one 6-list per tensor id, timing, forward/backward links,
collectives, the triton kernel, the escaped op name, and object-id retirement: the runtime
announces each new tensor object with a "minitensor::alloc" op whose inputs name the pool
slot (its address) and the slot's generation (how many times the address was reused), so
a recycled address must show up with a new tensor id (and a recycled storage address with
a new storage id).
"""

import argparse
import json
import math
import re
import sys
from collections import Counter, defaultdict

PROCESS_NAME = "[pytorch|profiler|execution_trace|process]"
THREAD_NAME = "[pytorch|profiler|execution_trace|thread]"
SCHEMAS = {"1.1.1": "1.1.1-chakra.0.0.4", "1.1.0": "1.1.0-chakra.0.0.4"}
TOP_KEYS = ["schema", "pid", "time", "start_ts", "nodes", "finish_ts"]
BASE_ATTRS = [
    ("rf_id", "uint64"),
    ("fw_parent", "uint64"),
    ("seq_id", "int64"),
    ("scope", "uint64"),
    ("tid", "uint64"),
    ("fw_tid", "uint64"),
    ("op_schema", "string"),
    ("kernel_backend", "string"),
    ("kernel_file", "string"),
]
COLLECTIVE_ATTRS = [
    ("collective_name", "string"),
    ("dtype", "string"),
    ("in_msg_nelems", "uint64"),
    ("out_msg_nelems", "uint64"),
    ("in_split_size", "string"),
    ("out_split_size", "string"),
    ("global_rank_start", "uint64"),
    ("global_rank_stride", "uint64"),
    ("pg_name", "string"),
    ("pg_desc", "string"),
    ("pg_size", "uint64"),
    ("is_asynchronized_op", "uint64"),
]
OTHER_ATTRS = {
    "kernel_grid": "string",
    "kernel_stream": "uint64",
    "tensor_range": "string",
    "os_tid": "uint64",
    "thread_name": "string",
    "etr_incomplete": "uint64",
    "traceback": "uint64",
    "traceback": "uint64",
}
RESERVED_ATTRS = {"cat", "stream", "name", "id", "inputs", "outputs", "parent"}
SCOPE_USER, SCOPE_BACKWARD = 7, 1

# What the runtime does (examples/minitensor.c).
WEIRD_NAME = 'custom::weird"op\\name\nline2'
WEIRD_INPUTS = ["tab\there \u00e9 \ufffd end", "nul\x00byte", "nan", "inf", "-inf", True,
                [7, [0.5, "x"]]]
WEIRD_TYPES = ["Tensor(float)", "String", "String", "Double", "Double", "Double", "Bool",
               "Tuple[Int,GenericList[Double,String]]"]
ALLOC_OP = "minitensor::alloc"
USER_SCOPES = {"## init model ##", "## forward ##", "## backward ##",
               "Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad", "## process_group:init ##"}
KERNEL_NAME = "triton_poi_fused__foreach_add_0"
KERNEL_XBLOCK = 64
# Backward node -> the forward op that made it (same seq_id, on the forward thread).
BACKWARD_OF = {
    "SumBackward0": "aten::sum",
    "MulBackward0": "aten::mul",
    "SubBackward0": "aten::sub",
    "AddBackward0": "aten::add",
    "MmBackward0": "aten::mm",
    "TBackward0": "aten::t",
    "ReluBackward0": "aten::relu",
}
ACCUMULATE = "torch::autograd::AccumulateGrad"
# Ops per worker and per step (name -> count), checked exactly with --iters.
PER_STEP_FORWARD = {
    "## forward ##": 1, "## backward ##": 1, "Optimizer.step#SGD.step": 1,
    "Optimizer.zero_grad#SGD.zero_grad": 1, "aten::linear": 2, "aten::relu": 1,
    "aten::sub": 1, "c10d::allreduce_": 1, "c10d::alltoall_base_": 1,
    "record_param_comms": 2, KERNEL_NAME: 1, "aten::item": 1, "aten::ones_like": 1,
}
PER_STEP_BACKWARD = {
    "SumBackward0": 1, "MulBackward0": 1, "SubBackward0": 1, "AddBackward0": 2,
    "MmBackward0": 2, "TBackward0": 2, "ReluBackward0": 1, ACCUMULATE: 4,
    "aten::threshold_backward": 1, "aten::expand": 1,
}
TIME_SLACK_US = 2  # ts and durations are whole microseconds
# The example's source files (minitensor.c and its mt_*.c): where its own frames are.
EXAMPLE_SOURCE = re.compile(r"(^|/)(minitensor|mt_[a-z_]+)\.c$")


class Checker:
    def __init__(self):
        self.failures = defaultdict(list)
        self.notes = []

    def fail(self, category, msg):
        self.failures[category].append(msg)

    def ok(self):
        return not self.failures


def where(node):
    name = node.get("name") if isinstance(node, dict) else None
    return "node %r (%r)" % (node.get("id") if isinstance(node, dict) else None, name)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def split_types(inner):
    """Split 'A,B[C,D],E' at the commas of depth 0."""
    out, depth, cur = [], 0, []
    for ch in inner:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur or out:
        out.append("".join(cur))
    return out


class Trace:
    """Everything the per-node checks collect, for the cross-node checks."""

    def __init__(self):
        self.tensors = defaultdict(set)   # tensor id -> {(6-list, shape, strides)}
        self.storages = defaultdict(set)  # storage id -> {(itemsize, device)}
        self.undefined_ids = set()


def check_value(ck, tr, v, t, shape, strides, has_strides, ctx):
    """Check one value against its type string; collect tensors."""
    if not isinstance(t, str):
        ck.fail("types", "%s: type %r is not a string" % (ctx, t))
        return
    if has_strides and strides is None:
        ck.fail("values", "%s: missing strides entry" % ctx)
    m = re.fullmatch(r"(GenericList|Tuple)\[(.*)\]", t)
    if m:
        subs = split_types(m.group(2)) if m.group(2) else []
        if not isinstance(v, list) or len(v) != len(subs):
            ck.fail("values", "%s: %s value %r does not have %d items" % (ctx, t, v, len(subs)))
            return
        if not isinstance(shape, list) or len(shape) != len(subs):
            ck.fail("values", "%s: %s shape %r does not have %d items" % (ctx, t, shape, len(subs)))
            return
        if has_strides and (not isinstance(strides, list) or len(strides) != len(subs)):
            ck.fail("values", "%s: %s strides %r do not have %d items" % (ctx, t, strides, len(subs)))
            return
        for i, sub in enumerate(subs):
            check_value(ck, tr, v[i], sub, shape[i], strides[i] if has_strides else None,
                        has_strides, "%s[%d]" % (ctx, i))
        return
    if t.startswith("Tensor("):
        if t == "Tensor(nullptr (uninitialized))":
            if not (isinstance(v, list) and len(v) == 6 and is_int(v[0]) and v[0] > 0
                    and v[1:] == [0, 0, 0, 0, ""]):
                ck.fail("values", "%s: undefined tensor value %r is not [id, 0, 0, 0, 0, \"\"]" % (ctx, v))
                return
            tr.undefined_ids.add(v[0])
            tr.tensors[v[0]].add((json.dumps(v), "[]", "[]"))
            if shape != [] or (has_strides and strides != []):
                ck.fail("values", "%s: undefined tensor with shape %r strides %r" % (ctx, shape, strides))
            return
        if not (isinstance(v, list) and len(v) == 6 and all(is_int(x) for x in v[:5])
                and isinstance(v[5], str)):
            ck.fail("values", "%s: tensor value %r is not [int x5, \"device\"]" % (ctx, v))
            return
        tid_, sid, offset, numel, itemsize, device = v
        if tid_ <= 0 or sid <= 0 or offset < 0 or numel < 0:
            ck.fail("values", "%s: tensor value %r has a bad id/storage/offset/numel" % (ctx, v))
        if t != "Tensor(float)" or itemsize != 4 or device != "cpu":
            ck.fail("values", "%s: runtime tensors are float/4 bytes/cpu, got %s %r" % (ctx, t, v))
        if not (isinstance(shape, list) and all(is_int(x) and x >= 0 for x in shape)):
            ck.fail("values", "%s: tensor shape %r is not a list of sizes" % (ctx, shape))
            return
        if math.prod(shape) != numel:
            ck.fail("values", "%s: numel %d != product of shape %r" % (ctx, numel, shape))
        if has_strides and not (isinstance(strides, list) and len(strides) == len(shape)
                                and all(is_int(x) for x in strides)):
            ck.fail("values", "%s: tensor strides %r do not match shape %r" % (ctx, strides, shape))
        tr.tensors[tid_].add((json.dumps(v), json.dumps(shape),
                              json.dumps(strides) if has_strides else ""))
        tr.storages[sid].add((itemsize, device))
        return
    # Scalars: shape [] and strides [].
    if shape != [] or (has_strides and strides != []):
        ck.fail("values", "%s: scalar %s with shape %r strides %r" % (ctx, t, shape, strides))
    if t == "Int":
        good = is_int(v)
    elif t == "Double":
        good = (isinstance(v, (int, float)) and not isinstance(v, bool)) or v in ("nan", "inf", "-inf")
    elif t == "Bool":
        good = isinstance(v, bool)
    elif t in ("String", "Device"):
        good = isinstance(v, str) and (t == "String" or v != "")
    elif t == "None":
        good = v == "<None>"
    elif re.fullmatch(r"<[^<>]+>", t):  # an object of a named kind (docs/FORMAT.md)
        good = v == t
    elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.:]*", t) and t not in ("Int", "Double"):
        good = v == "<%s>" % t  # PyTorch's own spelling of an object: type "Kind"
    else:
        ck.fail("types", "%s: unknown type %r" % (ctx, t))
        return
    if not good:
        ck.fail("values", "%s: value %r does not fit type %s" % (ctx, v, t))


def check_io(ck, tr, node, key, has_strides):
    io = node.get(key)
    ctx = "%s %s" % (where(node), key)
    want = ["values", "shapes", "types"] + (["strides"] if has_strides else [])
    if not isinstance(io, dict):
        ck.fail("node keys", "%s is not an object" % ctx)
        return None
    if list(io.keys()) != want:
        ck.fail("node keys", "%s keys %r, expected %r" % (ctx, list(io.keys()), want))
        return None
    if not all(isinstance(io[k], list) for k in want):
        ck.fail("values", "%s: values/shapes/types/strides must be arrays" % ctx)
        return None
    lens = {k: len(io[k]) for k in want}
    if len(set(lens.values())) != 1:
        ck.fail("values", "%s: arrays of unequal length %r" % (ctx, lens))
        return None
    for i in range(len(io["values"])):
        check_value(ck, tr, io["values"][i], io["types"][i], io["shapes"][i],
                    io["strides"][i] if has_strides else None, has_strides,
                    "%s[%d]" % (ctx, i))
    return io


def check_attrs(ck, node):
    """Returns {name: value} for a node's attrs, checking order, names and types."""
    attrs = node.get("attrs")
    ctx = where(node)
    if not isinstance(attrs, list):
        ck.fail("attrs", "%s: attrs is not an array" % ctx)
        return {}
    out, names = {}, []
    for i, a in enumerate(attrs):
        if not isinstance(a, dict) or list(a.keys()) != ["name", "type", "value"]:
            ck.fail("attrs", "%s: attr %d is not {name, type, value} in that order: %r" % (ctx, i, a))
            continue
        name, typ, val = a["name"], a["type"], a["value"]
        names.append(name)
        if name in out:
            ck.fail("attrs", "%s: attr %r appears twice" % (ctx, name))
        if name in RESERVED_ATTRS:
            ck.fail("attrs", "%s: attr name %r is reserved (Chakra copies attrs over fields)" % (ctx, name))
        out[name] = val
        if i < len(BASE_ATTRS):
            want = BASE_ATTRS[i]
            if (name, typ) != want:
                ck.fail("attrs", "%s: attr %d is (%r, %r), expected %r" % (ctx, i, name, typ, want))
                continue
        else:
            known = dict(COLLECTIVE_ATTRS)
            known.update(OTHER_ATTRS)
            if name not in known:
                ck.fail("attrs", "%s: unknown attr %r" % (ctx, name))
                continue
            if typ != known[name]:
                ck.fail("attrs", "%s: attr %r has type %r, expected %r" % (ctx, name, typ, known[name]))
                continue
        if typ == "uint64":
            good = is_int(val) and 0 <= val < 2 ** 63
        elif typ == "int64":
            good = is_int(val) and -(2 ** 63) <= val < 2 ** 63
        elif typ == "string":
            good = isinstance(val, str)
        else:
            good = False
        if not good:
            ck.fail("attrs", "%s: attr %r value %r is not a valid %s" % (ctx, name, val, typ))
    if len(names) < len(BASE_ATTRS):
        ck.fail("attrs", "%s: only %d attrs, the nine base attrs are required" % (ctx, len(names)))
    coll = [n for n in names if n in dict(COLLECTIVE_ATTRS)]
    if coll:
        start = names.index(coll[0])
        want = [n for n, _ in COLLECTIVE_ATTRS]
        if names[start:start + len(want)] != want:
            ck.fail("attrs", "%s: collective attrs %r, expected %r in that order" % (ctx, coll, want))
    return out


def check_tracebacks(ck, doc, keys, op_nodes, A):
    """Tables after finish_ts, consistent and deduplicated; every op's traceback resolves to
    real functions of the example (minitensor.c, mt_*.c) with lines. Returns the table size."""
    fi = keys.index("finish_ts") if "finish_ts" in keys else -1
    if keys[fi + 1:fi + 3] != ["frames", "tracebacks"]:
        ck.fail("traceback", "keys after finish_ts are %r, expected frames, tracebacks" % keys[fi + 1:])
        return 0
    frames, tbs = doc["frames"], doc["tracebacks"]
    if not isinstance(frames, list) or not isinstance(tbs, list):
        ck.fail("traceback", "frames/tracebacks are not arrays")
        return 0
    seen = set()
    for i, f in enumerate(frames):
        if not isinstance(f, dict) or list(f.keys())[:3] != ["name", "filename", "line"]:
            ck.fail("traceback", "frame %d is not {name, filename, line}: %r" % (i, f))
            continue
        if not (isinstance(f["name"], str) and isinstance(f["filename"], str) and is_int(f["line"])):
            ck.fail("traceback", "frame %d has bad types: %r" % (i, f))
        key = json.dumps(f, sort_keys=True)
        if key in seen:
            ck.fail("traceback", "frame %d is written twice: %r" % (i, f))
        seen.add(key)
    for i, tb in enumerate(tbs):
        if not isinstance(tb, list) or not tb or not all(is_int(k) and 0 <= k < len(frames) for k in tb):
            ck.fail("traceback", "traceback %d is not a non-empty list of frame indices: %r" % (i, tb))
            continue
        # Entries are unique by return addresses (the unit test checks identical stacks share
        # one); two address sequences may resolve to the same lines, so equal index lists are
        # allowed here (docs/FORMAT.md).
        own = [frames[k] for k in tb if EXAMPLE_SOURCE.search(frames[k]["filename"])]
        if not own:
            ck.fail("traceback", "traceback %d has no frame in the example's sources: %r"
                    % (i, [frames[k]["name"] for k in tb][:8]))
        for f in own:
            if not f["name"] or f["name"].startswith("minitensor+") or f["line"] <= 0:
                ck.fail("traceback", "traceback %d: example frame without name or line: %r" % (i, f))
    used = set()
    for n in op_nodes:
        nid = n["id"]
        if "traceback" not in A[nid]:
            ck.fail("traceback", "%s has no traceback attr" % where(n))
            continue
        if not (0 <= A[nid]["traceback"] < len(tbs)):
            ck.fail("traceback", "%s: traceback %r is out of range" % (where(n), A[nid]["traceback"]))
            continue
        used.add(A[nid]["traceback"])
    if len(used) != len(tbs):
        ck.fail("traceback", "%d tracebacks in the table, %d used by nodes" % (len(tbs), len(used)))
    names = {frames[k]["name"] for tb in tbs for k in tb}
    for want in ("worker_main",):  # a thread entry: never inlined
        if not any(x == want for x in names):
            ck.fail("traceback", "no frame named %r (the example's call chain)" % want)
    return len(tbs)


def parse_pairs(pairs):
    keys = [k for k, _ in pairs]
    d = dict(pairs)
    if len(d) != len(keys):
        dup = [k for k, c in Counter(keys).items() if c > 1]
        raise ValueError("duplicate key(s) %r in one object" % dup)
    return d


def reject_constant(name):
    raise ValueError("%s is not valid JSON" % name)


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")  # strict: the file must be valid UTF-8
    return json.loads(text, object_pairs_hook=parse_pairs, parse_constant=reject_constant), len(raw)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rank", type=int, default=None,
                    help="the trace is rank R of a --ranks run (one worker in this process)")
    ap.add_argument("--world", type=int, default=None, help="with --rank: the number of ranks")
    ap.add_argument("--iters", type=int, default=None)
    ap.add_argument("--schema", choices=sorted(SCHEMAS), default=None)
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--traceback", action="store_true",
                    help="every op carries a traceback resolved to the example's functions")
    args = ap.parse_args(argv)
    n_workers = args.threads
    if n_workers < 1:
        ap.error("--threads must be >= 1")
    if (args.rank is None) != (args.world is None):
        ap.error("--rank and --world go together")
    if args.rank is not None:
        n_workers = 1
        if not 0 <= args.rank < args.world:
            ap.error("--rank must be in [0, --world)")
    # Ranks in the collectives' process group: the worker threads, or the processes.
    group_size = args.world if args.world is not None else n_workers

    try:
        doc, size = load(args.trace)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        print("check_example_trace: %s: cannot read the trace: %s" % (args.trace, e), file=sys.stderr)
        return 2

    ck = Checker()
    tr = Trace()

    # ---- file ------------------------------------------------------------------------
    if not isinstance(doc, dict):
        print("check_example_trace: %s: top level is not an object" % args.trace, file=sys.stderr)
        return 2
    keys = list(doc.keys())
    if keys[:len(TOP_KEYS)] != TOP_KEYS:
        ck.fail("file", "top-level keys %r, expected %r first" % (keys, TOP_KEYS))
    schema = doc.get("schema")
    if schema not in SCHEMAS.values():
        ck.fail("file", "schema %r is not one of %r" % (schema, sorted(SCHEMAS.values())))
    if args.schema and schema != SCHEMAS[args.schema]:
        ck.fail("file", "schema %r, expected %r" % (schema, SCHEMAS[args.schema]))
    has_strides = schema != SCHEMAS["1.1.0"]
    if not (is_int(doc.get("pid")) and doc["pid"] > 0):
        ck.fail("file", "pid %r is not a positive int" % doc.get("pid"))
    if not (isinstance(doc.get("time"), str)
            and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", doc["time"])):
        ck.fail("file", "time %r is not YYYY-MM-DD HH:MM:SS" % doc.get("time"))
    start_ts, finish_ts = doc.get("start_ts"), doc.get("finish_ts")
    if not (is_int(start_ts) and is_int(finish_ts) and 0 <= start_ts <= finish_ts):
        ck.fail("file", "start_ts %r / finish_ts %r are not ints with start <= finish" % (start_ts, finish_ts))
        start_ts = finish_ts = None
    nodes = doc.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        ck.fail("file", "nodes is not a non-empty array")
        nodes = []
    nodes = [n for n in nodes if isinstance(n, dict) or ck.fail("node keys", "a node is not an object: %r" % (n,))]

    # ---- nodes: keys, attrs, values ---------------------------------------------------
    by_id, index, A = {}, {}, {}
    for i, n in enumerate(nodes):
        nid = n.get("id")
        timed = "ts" in n
        want = ["id", "name", "ctrl_deps", "inputs", "outputs"]
        want += ["ts", "inclusive_dur", "exclusive_dur"] if timed else []
        want += ["attrs"]
        if list(n.keys()) != want:
            ck.fail("node keys", "%s: keys %r, expected %r" % (where(n), list(n.keys()), want))
        if not is_int(nid) or nid <= 0:
            ck.fail("ids", "%s: id is not a positive int" % where(n))
            continue
        if nid in by_id:
            ck.fail("ids", "id %d is used by two nodes (%r and %r)" % (nid, by_id[nid].get("name"), n.get("name")))
            continue
        if not isinstance(n.get("name"), str):
            ck.fail("node keys", "%s: name is not a string" % where(n))
        if not is_int(n.get("ctrl_deps")):
            ck.fail("tree", "%s: ctrl_deps %r is not one int" % (where(n), n.get("ctrl_deps")))
        by_id[nid], index[nid] = n, i
        A[nid] = check_attrs(ck, n)
        check_io(ck, tr, n, "inputs", has_strides)
        check_io(ck, tr, n, "outputs", has_strides)

    # ---- process and thread nodes -----------------------------------------------------
    def base_is(nid, **want):
        a = A[nid]
        for k, v in want.items():
            if a.get(k) != v:
                ck.fail("roots", "%s: attr %s = %r, expected %r" % (where(by_id[nid]), k, a.get(k), v))

    def empty_io(n):
        empty = {"values": [], "shapes": [], "types": []}
        if has_strides:
            empty["strides"] = []
        return n.get("inputs") == empty and n.get("outputs") == empty

    procs = [nid for nid, n in by_id.items() if n.get("name") == PROCESS_NAME]
    if procs != [1] or not nodes or nodes[-1].get("id") != 1:
        ck.fail("roots", "the process node must be exactly one node, id 1, written last (found ids %r)" % procs)
    if 1 in by_id:
        p = by_id[1]
        if p.get("name") != PROCESS_NAME or p.get("ctrl_deps") != 1 or "ts" in p or not empty_io(p):
            ck.fail("roots", "node 1 is not a bare process node with ctrl_deps 1: %r" % {k: p.get(k) for k in ("name", "ctrl_deps")})
        base_is(1, rf_id=0, fw_parent=0, seq_id=-1, scope=7, tid=0, fw_tid=0, op_schema="",
                kernel_backend="", kernel_file="")
    threads = {}  # tid -> thread node id
    for nid, n in by_id.items():
        if n.get("name") != THREAD_NAME:
            continue
        if n.get("ctrl_deps") != 1 or "ts" in n or not empty_io(n):
            ck.fail("roots", "%s: a thread node has ctrl_deps 1, no timing, no inputs/outputs" % where(n))
        base_is(nid, rf_id=0, fw_parent=0, seq_id=-1, scope=7, fw_tid=0, op_schema="",
                kernel_backend="", kernel_file="")
        tid = A[nid].get("tid")
        if not is_int(tid) or tid <= 0:
            ck.fail("roots", "%s: thread tid %r is not positive" % (where(n), tid))
        elif tid in threads:
            ck.fail("roots", "two thread nodes for tid %d (ids %d and %d)" % (tid, threads[tid], nid))
        else:
            threads[tid] = nid
    if len(threads) < 2 * n_workers:
        ck.fail("roots", "%d thread nodes; the runtime records on %d workers and %d backward threads"
                % (len(threads), n_workers, n_workers))
    # each thread node names its kernel thread (os_tid, all distinct) and its name: the
    # runtime names its workers "worker <rank>" and its backward threads
    os_tids = [A[nid].get("os_tid") for nid in threads.values()]
    if not all(is_int(x) and x > 0 for x in os_tids) or len(set(os_tids)) != len(os_tids):
        ck.fail("roots", "thread nodes' os_tid attrs are not distinct positive ids: %r" % os_tids)
    names = [A[nid].get("thread_name") for nid in threads.values()]
    if sum(1 for x in names if isinstance(x, str) and x.startswith("worker ")) < n_workers or \
            sum(1 for x in names if x == "autograd backward") < n_workers:
        ck.fail("roots", "thread names %r lack 'worker N' / 'autograd backward'" % names)
    ops = [nid for nid, n in by_id.items() if n.get("name") not in (PROCESS_NAME, THREAD_NAME)]
    op_set = set(ops)

    # ---- tree: ctrl_deps, order, tids, id order within a thread ----------------------
    children = defaultdict(list)
    thread_of = {}
    for nid in ops:
        n = by_id[nid]
        parent = n.get("ctrl_deps")
        if parent not in by_id:
            ck.fail("tree", "%s: ctrl_deps %r names no node" % (where(n), parent))
            continue
        if parent == 1 or parent == nid:
            ck.fail("tree", "%s: an op's ctrl_deps must be an op or a thread node, not %r" % (where(n), parent))
            continue
        children[parent].append(nid)
        if by_id[parent].get("name") == THREAD_NAME:
            if index[nid] < index[parent]:
                ck.fail("tree", "%s is written before its thread node %d (thread nodes come first)" % (where(n), parent))
        elif index[nid] > index[parent]:
            ck.fail("tree", "%s is written after its parent %d (children complete first)" % (where(n), parent))
        # Walk up to the thread node.
        seen, cur = set(), nid
        while cur in op_set and cur not in seen:
            seen.add(cur)
            cur = by_id[cur].get("ctrl_deps")
        if cur in seen or by_id.get(cur, {}).get("name") != THREAD_NAME:
            ck.fail("tree", "%s does not reach a thread node through ctrl_deps" % where(n))
            continue
        thread_of[nid] = cur
        tid = A[nid].get("tid")
        if A[cur].get("tid") != tid:
            ck.fail("tree", "%s: tid %r, but its thread node %d has tid %r" % (where(n), tid, cur, A[cur].get("tid")))
        if parent in op_set and nid < parent:
            ck.fail("ids", "%s: id is smaller than its parent's %d (ids grow within a thread)" % (where(n), parent))
        if nid < cur:
            ck.fail("ids", "%s: id is smaller than its thread node's %d" % (where(n), cur))
    for nid in ops:
        if A[nid].get("tid") not in threads:
            ck.fail("tree", "%s: tid %r has no thread node" % (where(by_id[nid]), A[nid].get("tid")))
        sc = A[nid].get("scope")
        if not (is_int(sc) and 0 <= sc <= 9):
            ck.fail("attrs", "%s: scope %r is not 0..9" % (where(by_id[nid]), sc))
    rf_ids = Counter(A[nid].get("rf_id") for nid in ops)
    dup_rf = [r for r, c in rf_ids.items() if c > 1 or r == 0]
    if dup_rf:
        ck.fail("ids", "rf_id values not unique and nonzero across op nodes: %r" % dup_rf[:10])

    # ---- timing ------------------------------------------------------------------------
    if args.no_timing:
        for nid in ops:
            if "ts" in by_id[nid]:
                ck.fail("timing", "%s has timing keys although --no-timing" % where(by_id[nid]))
    else:
        for nid in ops:
            n = by_id[nid]
            if "ts" not in n:
                ck.fail("timing", "%s has no ts/inclusive_dur/exclusive_dur" % where(n))
                continue
            ts, inc, exc = n.get("ts"), n.get("inclusive_dur"), n.get("exclusive_dur")
            if not (is_int(ts) and is_int(inc) and is_int(exc) and inc >= exc >= 0 and ts >= 0):
                ck.fail("timing", "%s: ts %r inclusive %r exclusive %r (need inclusive >= exclusive >= 0)" % (where(n), ts, inc, exc))
                continue
            if start_ts is not None and not (start_ts * 1000 - 1000 <= ts and ts + inc <= finish_ts * 1000 + 1000):
                ck.fail("timing", "%s: [%d, %d] us is outside start_ts..finish_ts [%d, %d] ms" % (where(n), ts, ts + inc, start_ts, finish_ts))
            kids = [c for c in children.get(nid, []) if "ts" in by_id[c] and is_int(by_id[c].get("ts"))]
            for c in kids:
                cn = by_id[c]
                # exact: start and end are each rounded down, so nesting survives rounding
                if cn["ts"] < ts or cn["ts"] + cn["inclusive_dur"] > ts + inc:
                    ck.fail("timing", "%s [%d +%d] is not inside its parent %s [%d +%d]" % (where(cn), cn["ts"], cn["inclusive_dur"], where(n), ts, inc))
            if "etr_incomplete" not in A[nid]:
                inner = sum(by_id[c]["inclusive_dur"] for c in kids)
                # exact: the recorder subtracts its children's durations as written
                if exc != max(0, inc - inner):
                    ck.fail("timing", "%s: exclusive_dur %d != inclusive_dur %d - children's %d" % (where(n), exc, inc, inner))
        # Ids are drawn in begin order within a thread: sorted by id, ts does not go back.
        per_thread = defaultdict(list)
        for nid in ops:
            if is_int(by_id[nid].get("ts")):
                per_thread[A[nid].get("tid")].append(nid)
        for tid, ids in per_thread.items():
            ids.sort()
            for a, b in zip(ids, ids[1:]):
                if by_id[b]["ts"] < by_id[a]["ts"]:
                    ck.fail("ids", "thread %r: op %d begins at %d, after op %d which begins at %d (ids must follow begin order)" % (tid, a, by_id[a]["ts"], b, by_id[b]["ts"]))
                    break
        # ... and across threads (PARAM's et_replay and Chakra's feeder walk ids in order):
        # an op that begins later than an op with a larger id. The id is drawn right before
        # the clock is read, so only a thread preempted between the two can make one: none
        # in Release runs, 2 of 709 once under ASan with 7 threads on 2 cores. Per-thread
        # blocks of ids made about half of them, so the bound (1%) still tells the two apart
        # whatever the load.
        timed = sorted(nid for nid in ops if is_int(by_id[nid].get("ts")))
        late, first_late, low = 0, None, None
        for nid in reversed(timed):
            if low is not None and by_id[nid]["ts"] > low:
                late += 1
                first_late = nid
            low = by_id[nid]["ts"] if low is None else min(low, by_id[nid]["ts"])
        if late > max(2, len(timed) // 100):
            ck.fail("ids", "%d of %d ops begin later than an op with a larger id (e.g. op %d): ids must follow begin order across threads" % (late, len(timed), first_late))

    # ---- tensors and objects ------------------------------------------------------------
    for tid_, forms in tr.tensors.items():
        if len(forms) != 1:
            shown = sorted(forms)[:3]
            ck.fail("tensors", "tensor id %d appears as %d different values/shapes/strides: %s" % (tid_, len(forms), "; ".join(" ".join(f) for f in shown)))
    for sid, forms in tr.storages.items():
        if len(forms) != 1:
            ck.fail("tensors", "storage id %d appears with itemsize/device %r" % (sid, sorted(forms)))
    tensor_ids, storage_ids = set(tr.tensors), set(tr.storages)
    if tensor_ids & storage_ids:
        ck.fail("ids", "ids used both as tensor and storage ids: %r" % sorted(tensor_ids & storage_ids)[:10])
    if (tensor_ids | storage_ids) & set(by_id):
        ck.fail("ids", "object ids that are also node ids: %r" % sorted((tensor_ids | storage_ids) & set(by_id))[:10])
    if len(tr.undefined_ids) > 1:
        ck.fail("tensors", "the undefined tensor (one object in the runtime) has several ids %r" % sorted(tr.undefined_ids))

    # ---- object-id retirement: minitensor::alloc announcements -------------------------
    alloc_tensor, slot_gens = {}, defaultdict(set)
    storage_key_ids, storage_id_keys = defaultdict(set), defaultdict(set)
    storage_slot_gens = defaultdict(set)
    for nid in ops:
        n = by_id[nid]
        if n.get("name") != ALLOC_OP:
            continue
        vin, vout = n["inputs"]["values"], n["outputs"]["values"]
        if (n["inputs"]["types"] != ["Int"] * 4 or n["outputs"]["types"] != ["Tensor(float)"]
                or not all(is_int(x) for x in vin)):
            ck.fail("reuse", "%s: inputs must be 4 Ints and the output one tensor" % where(n))
            continue
        tslot, tgen, sslot, sgen = vin
        t = vout[0]
        if (tslot, tgen) in alloc_tensor:
            ck.fail("reuse", "tensor slot %d generation %d announced twice" % (tslot, tgen))
        if t[0] in alloc_tensor.values():
            other = [k for k, v in alloc_tensor.items() if v == t[0]]
            ck.fail("reuse", "tensor id %d is given to two different tensor objects: slot/generation %r and %r "
                    "(an id was not retired when the runtime said its tensor died)" % (t[0], other[0], (tslot, tgen)))
        alloc_tensor[(tslot, tgen)] = t[0]
        slot_gens[tslot].add(tgen)
        storage_key_ids[(sslot, sgen)].add(t[1])
        storage_id_keys[t[1]].add((sslot, sgen))
        storage_slot_gens[sslot].add(sgen)
    for key, ids in storage_key_ids.items():
        if len(ids) != 1:
            ck.fail("reuse", "storage slot %d generation %d (one storage object) has storage ids %r" % (key[0], key[1], sorted(ids)))
    for sid, keys_ in storage_id_keys.items():
        if len(keys_) != 1:
            ck.fail("reuse", "storage id %d is given to different storage objects %r (an id was not retired)" % (sid, sorted(keys_)))
    reused_t = sum(len(g) - 1 for g in slot_gens.values())
    reused_s = sum(len(g) - 1 for g in storage_slot_gens.values())
    if not alloc_tensor:
        ck.fail("reuse", "no %s op in the trace" % ALLOC_OP)
    elif reused_t == 0 or reused_s == 0:
        ck.fail("reuse", "no tensor or storage address was reused (%d, %d): the check proves nothing" % (reused_t, reused_s))
    announced = set(alloc_tensor.values())
    unannounced = tensor_ids - announced - tr.undefined_ids
    if unannounced:
        ck.fail("reuse", "tensor ids never announced by %s (stale or invented ids): %r" % (ALLOC_OP, sorted(unannounced)[:10]))

    # ---- names, scopes, forward/backward --------------------------------------------------
    count = Counter(by_id[nid].get("name") for nid in ops)
    fwd_threads, bwd_threads = set(), set()
    by_seq = defaultdict(set)  # (tid, seq) -> names of forward ops
    for nid in ops:
        a, name = A[nid], by_id[nid].get("name")
        if a.get("scope") == 0 and is_int(a.get("seq_id")) and a["seq_id"] >= 0:
            by_seq[(a.get("tid"), a["seq_id"])].add(name)
        if isinstance(name, str) and name.startswith("ProfilerStep#"):
            fwd_threads.add(a.get("tid"))
        want_user = name in USER_SCOPES or (isinstance(name, str) and re.fullmatch(r"ProfilerStep#\d+", name))
        if want_user and a.get("scope") != SCOPE_USER:
            ck.fail("scopes", "%s: a user-scope region must have scope 7, not %r" % (where(by_id[nid]), a.get("scope")))
        if not want_user and a.get("scope") == SCOPE_USER:
            ck.fail("scopes", "%s: scope 7 on an op the runtime does not record as a user scope" % where(by_id[nid]))
    for key, names in by_seq.items():
        if len(names) > 1 and names != {"aten::linear", "aten::t"}:
            ck.fail("backward", "thread %r seq_id %d is shared by forward ops %r" % (key[0], key[1], sorted(names)))
    bw_fw = defaultdict(set)  # backward thread tid -> fw_tids it served
    for nid in ops:
        n, a = by_id[nid], A[nid]
        if a.get("scope") != SCOPE_BACKWARD:
            if a.get("fw_tid") != 0 or a.get("fw_parent") != 0:
                ck.fail("backward", "%s: fw_tid %r / fw_parent %r on an op not run for another thread" % (where(n), a.get("fw_tid"), a.get("fw_parent")))
            continue
        bwd_threads.add(a.get("tid"))
        fw_tid, fw_parent = a.get("fw_tid"), a.get("fw_parent")
        bw_fw[a.get("tid")].add(fw_tid)
        if not fw_tid or fw_tid not in threads or fw_tid == a.get("tid"):
            ck.fail("backward", "%s: fw_tid %r is not another recording thread" % (where(n), fw_tid))
        if not fw_parent or fw_parent not in op_set:
            ck.fail("backward", "%s: fw_parent %r is not an op node" % (where(n), fw_parent))
        else:
            p, pa = by_id[fw_parent], A[fw_parent]
            if pa.get("tid") != fw_tid:
                ck.fail("backward", "%s: fw_parent %d runs on thread %r, not fw_tid %r" % (where(n), fw_parent, pa.get("tid"), fw_tid))
            if p.get("name") != "## backward ##":
                ck.fail("backward", "%s: fw_parent is %s; the forward thread waits inside '## backward ##'" % (where(n), where(p)))
            if not args.no_timing and is_int(p.get("ts")) and is_int(n.get("ts")):
                if n["ts"] < p["ts"] or n["ts"] + n["inclusive_dur"] > p["ts"] + p["inclusive_dur"] + TIME_SLACK_US:
                    ck.fail("backward", "%s [%d +%d] runs outside its fw_parent %s [%d +%d]" % (where(n), n["ts"], n["inclusive_dur"], where(p), p["ts"], p["inclusive_dur"]))
        name, seq = n.get("name"), a.get("seq_id")
        if name == ACCUMULATE:
            continue
        if name not in BACKWARD_OF:
            ck.fail("backward", "%s: unexpected backward-scope op" % where(n))
        elif not (is_int(seq) and seq >= 0):
            ck.fail("backward", "%s: seq_id %r, expected its forward op's sequence number" % (where(n), seq))
        elif BACKWARD_OF[name] not in by_seq.get((fw_tid, seq), set()):
            ck.fail("backward", "%s: no forward %s with seq_id %d on thread %r (found %r)" % (where(n), BACKWARD_OF[name], seq, fw_tid, sorted(by_seq.get((fw_tid, seq), set()))))
    if len(fwd_threads) != n_workers or len(bwd_threads) != n_workers:
        ck.fail("threads", "%d forward and %d backward threads, expected %d each" % (len(fwd_threads), len(bwd_threads), n_workers))
    for tid, fws in bw_fw.items():
        if len(fws) != 1:
            ck.fail("threads", "backward thread %r served several forward threads %r" % (tid, sorted(fws)))
    if len({next(iter(f)) for f in bw_fw.values() if len(f) == 1}) != len(bw_fw):
        ck.fail("threads", "two backward threads serve the same forward thread")
    if fwd_threads & bwd_threads:
        ck.fail("threads", "threads %r run both forward steps and backward nodes" % sorted(fwd_threads & bwd_threads))

    # ---- collectives ----------------------------------------------------------------------
    split_re = re.compile(r"\[(\d+(, \d+)*)?\]")
    n_coll = 0
    for nid in ops:
        n, a = by_id[nid], A[nid]
        has = [k for k, _ in COLLECTIVE_ATTRS if k in a]
        if n.get("name") != "record_param_comms":
            if has:
                ck.fail("collectives", "%s: collective attrs on a non-comms op" % where(n))
            continue
        n_coll += 1
        if len(has) != len(COLLECTIVE_ATTRS):
            ck.fail("collectives", "%s: collective attrs %r, expected all of %r" % (where(n), has, [k for k, _ in COLLECTIVE_ATTRS]))
            continue
        parent = by_id.get(n.get("ctrl_deps"), {}).get("name")
        vin = n["inputs"]["values"]
        expect = {"dtype": "Float", "global_rank_start": 0, "global_rank_stride": 1,
                  "pg_name": "0", "pg_desc": "default_pg", "pg_size": group_size}
        if parent == "c10d::allreduce_":
            numel = vin[0][0][3] if vin and isinstance(vin[0], list) and vin[0] and isinstance(vin[0][0], list) else None
            expect.update(collective_name="allreduce", in_msg_nelems=numel, out_msg_nelems=numel,
                          in_split_size="[]", out_split_size="[]", is_asynchronized_op=1)
        elif parent == "c10d::alltoall_base_":
            pvin = by_id[n["ctrl_deps"]]["inputs"]["values"]
            splits = "[%s]" % ", ".join(["2"] * group_size)
            expect.update(collective_name="all_to_allv", in_msg_nelems=pvin[1][3], out_msg_nelems=pvin[0][3],
                          in_split_size=splits, out_split_size=splits, is_asynchronized_op=0)
        else:
            ck.fail("collectives", "%s: parent is %r, not a c10d op" % (where(n), parent))
            continue
        for k, v in expect.items():
            if a.get(k) != v:
                ck.fail("collectives", "%s (under %s): %s = %r, expected %r" % (where(n), parent, k, a.get(k), v))
        for k in ("in_split_size", "out_split_size"):
            if not split_re.fullmatch(str(a.get(k))):
                ck.fail("collectives", "%s: %s %r is not \"[a, b]\"" % (where(n), k, a.get(k)))
        # The op's own inputs say the same thing as the attrs.
        # PyTorch's record_param_comms input order, which PARAM's comm replay reads by position:
        # tensors, seq, (pg_name, pg_desc), rank in the group, collective, in/out splits,
        # global rank start, stride, group size.
        # The tensors: a list for allreduce, one Tensor for all_to_allv (PyTorch's alltoall_base
        # records it so, and PARAM's et_replay fails replaying all_to_allv from a list).
        types = n["inputs"]["types"]
        first = "Tensor(float)" if parent == "c10d::alltoall_base_" else "GenericList[Tensor(float)]"
        want_types = [first, "Int", "Tuple[String,String]", "Int", "String",
                      None, None, "Int", "Int", "Int"]
        if len(vin) != 10 or any(w is not None and t != w for t, w in zip(types, want_types)):
            ck.fail("collectives", "%s: inputs typed %r, not in record_param_comms order" % (where(n), types))
        elif n["outputs"]["types"][:1] != [first]:
            ck.fail("collectives", "%s: outputs typed %r, expected %s first" % (where(n), n["outputs"]["types"], first))
        elif (vin[4] != a.get("collective_name") or vin[9] != a.get("pg_size")
              or vin[2] != ["0", "default_pg"] or vin[7] != 0 or vin[8] != 1):
            ck.fail("collectives", "%s: inputs %r disagree with the collective attrs" % (where(n), vin))
        elif args.rank is not None and vin[3] != args.rank:
            ck.fail("collectives", "%s: rank input %r, expected %d" % (where(n), vin[3], args.rank))
    if n_coll == 0:
        ck.fail("collectives", "no record_param_comms node with collective attrs")

    # ---- kernels -------------------------------------------------------------------------
    n_kernel = 0
    for nid in ops:
        n, a = by_id[nid], A[nid]
        if n.get("name") != KERNEL_NAME:
            if a.get("kernel_backend") or a.get("kernel_file") or "kernel_grid" in a or "kernel_stream" in a:
                ck.fail("kernels", "%s: kernel attrs on an op that launches no kernel" % where(n))
            continue
        n_kernel += 1
        vin = n["inputs"]["values"]
        # As PyTorch lays out a triton launch: kernel arguments (tensors, xnumel), then the stream.
        numel = vin[-2] if len(vin) >= 2 and is_int(vin[-2]) else None
        grid = "[%d, 1, 1]" % ((numel + KERNEL_XBLOCK - 1) // KERNEL_XBLOCK) if numel is not None else None
        if a.get("kernel_backend") != "triton":
            ck.fail("kernels", "%s: kernel_backend %r, expected 'triton'" % (where(n), a.get("kernel_backend")))
        if not (isinstance(a.get("kernel_file"), str) and "/" not in a["kernel_file"] and a["kernel_file"].endswith(".py")):
            ck.fail("kernels", "%s: kernel_file %r is not the kernel's .py basename" % (where(n), a.get("kernel_file")))
        if a.get("tensor_range") != "":
            ck.fail("kernels", "%s: tensor_range %r, expected '' (as PyTorch writes a triton launch)" % (where(n), a.get("tensor_range")))
        if a.get("kernel_grid") != grid:
            ck.fail("kernels", "%s: kernel_grid %r, expected %r" % (where(n), a.get("kernel_grid"), grid))
        if not is_int(a.get("kernel_stream")) or not 7 <= a["kernel_stream"] < 7 + group_size:
            ck.fail("kernels", "%s: kernel_stream %r, expected 7 + rank" % (where(n), a.get("kernel_stream")))
        elif args.rank is not None and a["kernel_stream"] != 7 + args.rank:
            ck.fail("kernels", "%s: kernel_stream %r, expected %d" % (where(n), a["kernel_stream"], 7 + args.rank))
        if not vin or vin[-1] != a.get("kernel_stream"):
            ck.fail("kernels", "%s: last input %r is not the stream %r" % (where(n), vin[-1:] , a.get("kernel_stream")))
    if n_kernel == 0:
        ck.fail("kernels", "no %s node with kernel_backend 'triton'" % KERNEL_NAME)

    # ---- process groups (docs/FORMAT.md) -------------------------------------------------
    pg_nodes = [nid for nid in ops if by_id[nid].get("name") == "## process_group:init ##"]
    if not pg_nodes:
        ck.fail("groups", "no '## process_group:init ##' node")
    for nid in pg_nodes:
        n = by_id[nid]
        vals, types = n["inputs"]["values"], n["inputs"]["types"]
        if types != ["String"] or len(vals) != 1:
            ck.fail("groups", "%s: inputs %r, expected one String" % (where(n), types))
            continue
        try:
            groups = json.loads(vals[0])
        except ValueError as e:
            ck.fail("groups", "%s: the input is not JSON: %s" % (where(n), e))
            continue
        pg_keys = {"pg_name", "pg_desc", "backend_config", "ranks", "group_size", "group_count", "rank"}
        if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) and pg_keys <= set(g) for g in groups):
            ck.fail("groups", "%s: %r is not a list of groups with keys %r" % (where(n), groups, sorted(pg_keys)))
            continue
        world = [g for g in groups if g["pg_name"] == "0"]
        if len(world) != 1 or any(g["group_count"] != len(groups) for g in groups):
            ck.fail("groups", "%s: no single group \"0\" or wrong group_count in %r" % (where(n), groups))
            continue
        if args.rank is not None and (world[0]["group_size"] != args.world or world[0]["rank"] != args.rank):
            ck.fail("groups", "%s: group 0 is %r, expected size %d and rank %d" % (where(n), world[0], args.world, args.rank))
    if args.rank is not None and pg_nodes and "cpu:minitensor" not in by_id[max(pg_nodes)]["inputs"]["values"][0]:
        ck.fail("groups", "the newest process-group node does not carry the runtime's declared group")

    # ---- the weird name and awkward values ---------------------------------------------
    weird = [nid for nid in ops if by_id[nid].get("name") == WEIRD_NAME]
    if len(weird) != n_workers:
        near = [by_id[nid].get("name") for nid in ops if "weird" in str(by_id[nid].get("name"))]
        ck.fail("escaping", "%d nodes named %r (one per worker expected); similar names: %r" % (len(weird), WEIRD_NAME, near[:3]))
    for nid in weird:
        io = by_id[nid]["inputs"]
        if io["values"][1:] != WEIRD_INPUTS or io["types"] != WEIRD_TYPES:
            ck.fail("escaping", "%s: inputs %r %r, expected [tensor] + %r %r" % (where(by_id[nid]), io["values"][1:], io["types"], WEIRD_INPUTS, WEIRD_TYPES))
        if io["shapes"][1:] != [[]] * 6 + [[[], [[], []]]]:
            ck.fail("escaping", "%s: nested shapes %r" % (where(by_id[nid]), io["shapes"]))

    # ---- exact counts per step ---------------------------------------------------------
    if args.iters is not None:
        for name, per in list(PER_STEP_FORWARD.items()) + list(PER_STEP_BACKWARD.items()):
            want = per * args.iters * n_workers
            if count.get(name, 0) != want:
                ck.fail("counts", "%d %r ops, expected %d (%d per step x %d steps x %d workers)" % (count.get(name, 0), name, want, per, args.iters, n_workers))
        for tid in fwd_threads:
            steps = sorted(by_id[nid]["name"] for nid in ops if A[nid].get("tid") == tid and str(by_id[nid].get("name")).startswith("ProfilerStep#"))
            if steps != sorted("ProfilerStep#%d" % i for i in range(args.iters)):
                ck.fail("counts", "thread %r steps %r, expected ProfilerStep#0..%d" % (tid, steps[:5], args.iters - 1))

    # ---- footer --------------------------------------------------------------------------
    etr = doc.get("etr")
    if etr is not None:
        if not (isinstance(etr, dict) and isinstance(etr.get("version"), str)):
            ck.fail("footer", "etr footer %r has no version string" % (etr,))
        stats = etr.get("stats", {}) if isinstance(etr, dict) else {}
        want = {"nodes_written": len(nodes), "ops_recorded": len(ops), "threads": len(threads),
                "objects": len(tensor_ids | storage_ids), "ends_without_begin": 0,
                "ends_out_of_order": 0, "ops_open_at_disable": 0, "ops_open_at_thread_exit": 0,
                "ops_open_at_close": 0, "nodes_dropped": 0, "strings_cut": 0, "lists_cut": 0,
                "nesting_cut": 0, "utf8_replaced": len(weird)}
        for k, v in want.items():
            if k in stats and stats[k] != v:
                ck.fail("footer", "stats.%s = %r, but the trace shows %r" % (k, stats[k], v))
        if "ids_retired" in stats and not (reused_t + reused_s <= stats["ids_retired"] <= stats.get("objects", 1 << 62)):
            ck.fail("footer", "stats.ids_retired = %r, but %d addresses were reused" % (stats["ids_retired"], reused_t + reused_s))
    for nid in ops:
        if "etr_incomplete" in A[nid]:
            ck.fail("tree", "%s is marked incomplete, but the runtime closes every op" % where(by_id[nid]))

    # ---- tracebacks (docs/FORMAT.md) ---------------------------------------------------------
    n_tb = 0
    if args.traceback:
        n_tb = check_tracebacks(ck, doc, keys, [by_id[nid] for nid in ops], A)
    elif "frames" in doc or "tracebacks" in doc:
        ck.fail("traceback", "frames/tracebacks tables although tracebacks were off")

    # ---- report ----------------------------------------------------------------------------
    summary = ("%s: %d bytes, schema %s, %d nodes (%d ops, %d threads), %d tensor ids, %d storage ids, "
               "%d tensor and %d storage addresses reused, %d collectives, %d kernels, %d tracebacks"
               % (args.trace, size, schema, len(nodes), len(ops), len(threads), len(tensor_ids),
                  len(storage_ids), reused_t, reused_s, n_coll, n_kernel, n_tb))
    if ck.ok():
        print("check_example_trace: OK: " + summary)
        return 0
    total = sum(len(v) for v in ck.failures.values())
    print("check_example_trace: FAILED: %d problem(s) in %s" % (total, summary), file=sys.stderr)
    for cat, msgs in ck.failures.items():
        print("  [%s] %d problem(s)" % (cat, len(msgs)), file=sys.stderr)
        for m in msgs[:15]:
            print("    - " + m, file=sys.stderr)
        if len(msgs) > 15:
            print("    ... and %d more" % (len(msgs) - 15), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
