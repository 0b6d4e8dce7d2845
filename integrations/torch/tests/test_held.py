"""etr.torch's per-op paths beyond the side-by-side loop (ctest torch.held):

- attached with no trace open: ops run through the callback without being recorded (each
  op's context goes straight back to the thread's free list), on two threads;
- tensors and storages that die and come back at the same addresses (an op's outputs, a
  tensor given new storages): each new object its own id (held.h's cache of recent pairs);
- many tensors alive at once: a thread's held set grows past its first 256 slots (half
  full at 128 objects), and every living tensor and storage keeps its own id;
- lists of tensors (aten::cat, aten::stack) and scalars converted, the trace valid;
- names and schemas: records that name themselves (custom autograd Functions, in the scope
  of operators, with short names that PyTorch keeps inside the RecordFunction on the stack,
  so one address holds each name in turn) and user scopes keep their own names, and every
  operator node carries its own operator's schema;
- tensors of other kinds: nested (no one shape: its sizes() throws, which must not escape
  the callback and lose the op), sparse (no strides), quantized, and on the meta device.

usage: test_held.py ETR_TOOL   (PYTHONPATH holds <build>/python); exit 77 = skipped
"""
import json
import os
import sys
import threading

try:
    import torch
    import etr.torch
    from etr import _torch
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "tests", "pylib"))
from etr_checks import check, finish, scratch_dir, validate  # noqa: E402


def churn(n):
    x = torch.ones(3, 3)
    for _ in range(n):
        x = torch.relu(torch.add(x, 1.0))
    return x


def named_function(name):
    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2
    F.__name__ = F.__qualname__ = name
    return F


def check_names(tool, path):
    fns = [named_function(n) for n in ("FnA", "FnBB", "FnCCC")]
    x = torch.ones(2, requires_grad=True)
    want = []
    with etr.torch.trace(path):
        for i in range(60):
            fns[i % 3].apply(x)
            want.append(fns[i % 3].__name__)
            with torch.autograd.profiler.record_function("scope%d" % i):
                torch.add(x, 1.0 if i % 2 else 1)  # (add.Tensor)
                torch.ops.aten.add.Scalar(x, 2)
            want.append("scope%d" % i)
    validate(tool, path)
    with open(path) as f:
        nodes = json.load(f)["nodes"]
    mine = set(want)
    got = [n["name"] for n in nodes if n["name"] in mine or n["name"].startswith(("Fn", "scope"))]
    check(got == want, "records keep their own names: %r" % [
        (i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w][:5])
    bad = []
    n_schemas = 0
    for n in nodes:
        attrs = {a["name"]: a["value"] for a in n.get("attrs", [])}
        schema = attrs.get("op_schema", "")
        if n["name"].startswith("aten::"):
            n_schemas += 1
            # "aten::add.Tensor(Tensor self, ...": the node's own operator
            if not (schema.startswith(n["name"] + ".") or schema.startswith(n["name"] + "(")):
                bad.append((n["name"], schema))
        elif schema:
            bad.append((n["name"], schema))
    check(n_schemas > 100 and not bad, "%d operator schemas, mismatched: %r" % (n_schemas, bad[:5]))
    overloads = {a["value"].split("(")[0] for n in nodes for a in n.get("attrs", [])
                 if a["name"] == "op_schema" and a["value"].startswith("aten::add")}
    check({"aten::add.Tensor", "aten::add.Scalar"} <= overloads, "overloads: %r" % overloads)


def check_kinds(tool, path):
    if not hasattr(torch, "nested"):
        print("tensor kinds: skipped (no torch.nested)")
        return
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (nested tensors: "prototype stage")
        nt = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)])
        with etr.torch.trace(path):
            padded = torch.nested.to_padded_tensor(nt + nt, 0.0)
            sp = torch.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2))
            dense = (sp + sp).to_dense()
            q = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8)
            dq = torch.dequantize(q)
            meta = torch.empty(3, 4, device="meta") * 2
    check(padded.shape == (2, 4, 3) and dense.sum().item() == 6.0 and dq.shape == (3,)
          and meta.shape == (3, 4), "the ops ran as untraced")
    validate(tool, path)
    nodes = json.load(open(path))["nodes"]

    def named(name):
        return [n for n in nodes if n["name"] == name]
    # the nested add: recorded, its one input twice by identity, with no shape
    adds = [n for n in named("aten::add") if n["inputs"]["shapes"][:2] == [[], []]]
    check(len(adds) == 1, "one add of nested tensors, without shapes: %d" % len(adds))
    if adds:
        v = adds[0]["inputs"]["values"]
        check(v[0][0] == v[1][0] and v[0][0] > 0, "a + a: one nested tensor's id twice: %r" % v)
        check(adds[0]["outputs"]["shapes"] == [[]], "the nested sum, without a shape")
    check(any(n["outputs"]["shapes"] == [[2, 4, 3]] for n in named("aten::to_padded_tensor")),
          "to_padded_tensor's dense output, shaped")
    check(any(n["inputs"]["shapes"][0] == [2, 2] for n in named("aten::add")), "sparse add")
    check(any(n["inputs"]["shapes"][0] == [3] for n in named("aten::dequantize")),
          "dequantize of a quantized tensor")
    mul = [n for n in named("aten::mul") if n["inputs"]["shapes"][0] == [3, 4]]
    check(mul and mul[0]["inputs"]["values"][0][5] == "meta", "the meta tensor: %r" % mul[:1])


def check_reuse(tool, path):
    """Tensors and storages that die and come back at the same addresses (the allocator
    hands a freed object's memory to the next new one): each new object gets a new id. The
    held set's cache of recent pairs (held.h) would, if an entry outlived the release of its
    objects, take a new object at a released address for the old one and not hold it; its
    death then goes unseen, and the next object there inherits its id."""
    n = 400
    x = torch.ones(3, 3)
    p = torch.ones(4)
    try:
        import numpy
    except ImportError:
        numpy = None
    with etr.torch.trace(path):
        for i in range(n):  # outputs dying an op or two later
            x = torch.relu(torch.add(x, 1.0))
        for i in range(n):
            # p keeps its TensorImpl and is given a new storage that no op reported (numpy's
            # memory, or a buffer's), recorded only every other time: the storage it had when
            # last recorded dies and is let go meanwhile, and a new one may take its address
            if numpy is not None:
                p.data = torch.from_numpy(numpy.full(4, float(i), dtype=numpy.float32))
            else:
                p.data = torch.frombuffer(bytearray(16), dtype=torch.float32)
            if i % 2 == 0:
                torch.mul(p, 2.0)
            torch.neg(torch.ones(1))  # (new objects: the set's young sweeps)
    validate(tool, path)
    with open(path) as f:
        nodes = json.load(f)["nodes"]
    outs = [n["outputs"]["values"][0] for n in nodes
            if n["name"] in ("aten::add", "aten::relu") and n["outputs"]["shapes"] == [[3, 3]]]
    check(len(outs) == 2 * n, "%d add and relu outputs: %d" % (2 * n, len(outs)))
    check(len({o[0] for o in outs}) == len(outs),
          "each new tensor its own id: %d ids for %d tensors" % (len({o[0] for o in outs}),
                                                                 len(outs)))
    check(len({o[1] for o in outs}) == len(outs),
          "each new storage its own id: %d ids for %d storages" % (len({o[1] for o in outs}),
                                                                   len(outs)))
    ins = [n["inputs"]["values"][0] for n in nodes
           if n["name"] == "aten::mul" and n["inputs"]["shapes"][0] == [4]]
    check(len(ins) == n // 2, "%d aten::mul of p: %d" % (n // 2, len(ins)))
    check(len({v[0] for v in ins}) == 1, "p keeps its one id: %r" % sorted({v[0] for v in ins}))
    check(len({v[1] for v in ins}) == len(ins),
          "each of p's storages its own id: %d ids for %d storages" % (len({v[1] for v in ins}),
                                                                     len(ins)))


def main():
    tool = sys.argv[1]
    tmp = scratch_dir("etr-torch-held-")
    path = os.path.join(tmp, "held.json")

    # attached, nothing observing: nothing recorded, nothing breaks (more ops than the 256
    # contexts a thread keeps)
    _torch.attach()
    try:
        threads = [threading.Thread(target=churn, args=(600,)) for _ in range(2)]
        for t in threads:
            t.start()
        churn(600)
        for t in threads:
            t.join()
    finally:
        _torch.detach()

    n_live = 1000
    with etr.torch.trace(path) as t:
        live = [torch.add(torch.ones(2), float(i)) for i in range(n_live)]  # all alive
        cat = torch.cat(live[:5])
        st = torch.stack(live[5:9], 0)
        churn(300)
    check(t.stats["ends_without_begin"] == 0 and t.stats["ops_open_at_close"] == 0,
          "no misuse: %r" % t.stats)
    check(float(cat.sum()) == sum(2 * (1.0 + i) for i in range(5)), "values unchanged")
    check(st.shape == (4, 2), "stack shape")
    validate(tool, path)

    with open(path) as f:
        nodes = json.load(f)["nodes"]
    # (the Python float comes wrapped as a 0-dim double tensor)
    adds = [n for n in nodes if n["name"] == "aten::add"
            and n["inputs"]["types"] == ["Tensor(float)", "Tensor(double)", "Int"]
            and n["outputs"]["shapes"] == [[2]]]
    outs = [n["outputs"]["values"][0] for n in adds[:n_live]]
    check(len(outs) == n_live, "%d aten::add of ones(2) recorded: %d" % (n_live, len(outs)))
    check(len({o[0] for o in outs}) == n_live, "each living tensor has its own id")
    check(len({o[1] for o in outs}) == n_live, "each living storage has its own id")
    cats = [n for n in nodes if n["name"] == "aten::cat"]
    # (the first: aten::stack calls aten::cat too)
    check(len(cats) == 2 and cats[0]["inputs"]["types"][0] == "GenericList[%s]" % ",".join(
        ["Tensor(float)"] * 5), "aten::cat's list input: %r" % (
            cats[0]["inputs"]["types"] if cats else None))
    if cats:
        ids = [v[0] for v in cats[0]["inputs"]["values"][0]]
        check(ids == [o[0] for o in outs[:5]], "the list holds the same tensors: %r" % ids)
    check_reuse(tool, os.path.join(tmp, "reuse.json"))
    check_names(tool, os.path.join(tmp, "names.json"))
    check_kinds(tool, os.path.join(tmp, "kinds.json"))
    return finish("held: %d living tensors with distinct ids, lists and attach without a trace "
                  "fine; new objects at old addresses get new ids; names and schemas each "
                  "their own; nested, sparse, quantized and meta tensors recorded" % n_live)


if __name__ == "__main__":
    sys.exit(main())
