"""etr.torch side by side with PyTorch's own execution-graph observer (ctest
torch.side_by_side): the same small training loop (2 threads, forward, backward and an
optimizer step each) recorded by both must give, thread by thread, the same ops in the
same order with the same input/output shapes and types, and the same tensors: each etr
tensor id stands for one PyTorch tensor id. PyTorch's observer never retires an id, so a
new tensor at a dead one's address shares its id (one id, several storages and sizes); etr
retires them, so an etr id never stands for two storages (checked), and one PyTorch id may
be several of etr's. etr's trace must pass `etr validate`. docs/TORCH.md lists the differences.
etr records the loop twice: with etr.torch.trace, and through the drop-in
etr.torch.ExecutionGraphObserver driven by the same calls as PyTorch's observer (ops run
while it is registered but not started, or stopped, are not in its trace).

usage: test_side_by_side.py ETR_TOOL   (PYTHONPATH holds <build>/python); exit 77 = skipped
"""
import json
import os
import sys
import threading

try:
    import torch
    from torch.profiler import ExecutionGraphObserver
except ImportError as e:  # no PyTorch here (Debian: python3-torch)
    print("skipped: %s" % e)
    sys.exit(77)
try:
    import etr.torch
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "tests", "pylib"))
from etr_checks import check, finish, scratch_dir, validate  # noqa: E402


def make_worker(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(5, 8), torch.randn(5, 4)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    return step


def run_threads(steps):
    # one after the other on their own threads: each thread's op sequence is deterministic
    for s in steps:
        t = threading.Thread(target=s)
        t.start()
        t.join()


def is_meta(n):
    return n["name"].startswith("[pytorch|") or n["name"].startswith("## ")


def tensor_ids(vals, out):
    for v in vals:
        if isinstance(v, list) and len(v) == 6 and isinstance(v[5], str):
            out.append(v[0])
        elif isinstance(v, list):
            tensor_ids(v, out)


def tensor_forms(nodes, values_of):
    """tensor id -> the set of (storage id, itemsize) it appears with (not numel: resize_
    changes the size of a tensor in place)"""
    forms = {}

    def walk(vals):
        for v in vals:
            if isinstance(v, list) and len(v) == 6 and isinstance(v[5], str):
                forms.setdefault(v[0], set()).add((v[1], v[4]))
            elif isinstance(v, list):
                walk(v)

    for n in nodes:
        if not is_meta(n):
            walk(values_of(n))
    return forms


def ops_by_thread(nodes, view):
    by = {}
    for n in sorted((n for n in nodes if not is_meta(n)), key=lambda n: n["id"]):
        by.setdefault(view(n)["tid"], []).append(view(n))
    return [by[k] for k in sorted(by, key=lambda k: by[k][0]["id"])]


def eg_view(n):
    ts = []
    tensor_ids(n.get("inputs", []) + n.get("outputs", []), ts)
    return {"id": n["id"], "tid": n["tid"], "name": n["name"],
            "in": (n.get("input_shapes"), n.get("input_types")),
            "out": (n.get("output_shapes"), n.get("output_types")), "tensors": ts}


def et_view(n):
    a = {x["name"]: x["value"] for x in n["attrs"]}
    ts = []
    tensor_ids(n["inputs"]["values"] + n["outputs"]["values"], ts)
    return {"id": n["id"], "tid": a["tid"], "name": n["name"],
            "in": (n["inputs"]["shapes"], n["inputs"]["types"]),
            "out": (n["outputs"]["shapes"], n["outputs"]["types"]), "tensors": ts}


def main():
    tool = sys.argv[1]
    tmp = scratch_dir("etr-torch-")
    eg_path, et_path = os.path.join(tmp, "eg.json"), os.path.join(tmp, "et.json")
    dropin_path = os.path.join(tmp, "dropin.json")
    steps = [make_worker(1), make_worker(2)]
    run_threads(steps)  # warm up: lazily made state (momentum buffers) exists from now on

    eg = ExecutionGraphObserver()
    eg.register_callback(eg_path)
    eg.start()
    run_threads(steps)
    eg.stop()
    eg.unregister_callback()

    with etr.torch.trace(et_path) as t:
        run_threads(steps)
    check(t.stats["ends_without_begin"] == 0 and t.stats["ops_open_at_close"] == 0,
          "no misuse: %r" % t.stats)
    validate(tool, et_path)

    # The drop-in: the same calls as for PyTorch's observer, only the class is etr's.
    dropin = etr.torch.ExecutionGraphObserver()
    check(dropin.register_callback(dropin_path) is dropin, "register_callback returns it")
    check(dropin.is_registered and not dropin.is_running(), "registered, not running")
    run_threads(steps[:1])  # registered but not started: not recorded
    dropin.start()
    run_threads(steps)
    dropin.stop()
    run_threads(steps[:1])  # stopped: not recorded
    check(dropin.get_output_file_path() == dropin_path, "output file path")
    dropin.unregister_callback()
    check(not dropin.is_registered, "unregistered")
    check(dropin.stats["ends_without_begin"] == 0 and dropin.stats["ops_open_at_close"] == 0,
          "no misuse (drop-in): %r" % dropin.stats)
    validate(tool, dropin_path)

    with open(eg_path) as f:
        eg_nodes = json.load(f)["nodes"]
    for path, label in ((et_path, "etr.torch.trace"), (dropin_path, "drop-in observer")):
        with open(path) as f:
            n_ops, n_tensors = compare(eg_nodes, json.load(f)["nodes"], label)
    dropin_edges(tool, tmp, steps)
    same_rf_ids(tool, tmp, steps)
    failed_ops(tool, tmp)
    return finish("side by side: %d ops on 2 threads, %d tensors, identical (etr.torch.trace "
                  "and the drop-in observer)" % (n_ops, n_tensors))


def dropin_edges(tool, tmp, steps):
    """The drop-in where code written for PyTorch's observer may lean on it: a second
    register_callback is a no-op, a path that cannot be opened raises (PyTorch's stays
    unregistered without a word), and an observer dropped without unregistering finalizes
    its file."""
    first, second = os.path.join(tmp, "first.json"), os.path.join(tmp, "second.json")
    o = etr.torch.ExecutionTraceObserver()
    check(o.register_callback(first) is o and o.register_callback(second) is o, "returns it")
    check(o.get_output_file_path() == first and not os.path.exists(second), "kept the first")
    o.start()
    run_threads(steps[:1])
    del o  # (CPython: finalized here, as PyTorch's observer is)
    validate(tool, first)
    with open(first) as f:
        check(any(n["name"] == "aten::mse_loss" for n in json.load(f)["nodes"]),
              "ops of the observer dropped without unregistering are in its file")
    bad = etr.torch.ExecutionTraceObserver()
    try:
        bad.register_callback(os.path.join(tmp, "no-such-dir", "x.json"))
        check(False, "an unwritable path raises")
    except etr.EtrError:
        pass
    check(not bad.is_registered and not etr.torch._torch.attached(), "left unregistered")
    pytorch_2_7_names(tool, tmp, steps)


def pytorch_2_7_names(tool, tmp, steps):
    """What PyTorch 2.7's observer has beyond 2.4's, for code written against it: the path
    after unregistering (and None before registering), _registered and
    _execution_trace_running, the resources directory, an observer made from
    ENABLE_PYTORCH_EXECUTION_TRACE; and the cycle torch.profiler.profile drives (start and
    stop once per active cycle, then cleanup, then a second unregister_callback)."""
    path = os.path.join(tmp, "p27.json")
    o = etr.torch.ExecutionTraceObserver()
    check(o.get_output_file_path() is None and not o._registered, "None before registering")
    o.register_callback(path)
    check(o._registered and not o._execution_trace_running, "registered, not running")
    for _ in range(3):  # (profile's schedule: one start/stop a cycle)
        o.start()
        check(o._execution_trace_running, "running")
        run_threads(steps[:1])
        o.stop()
    o.cleanup()
    o.unregister_callback()  # (a second time, as Chakra's scripts do after the block)
    check(o.get_output_file_path() == path and not o._registered, "the path after unregistering")
    validate(tool, path)
    with open(path) as f:
        steps_seen = sum(n["name"] == "aten::mse_loss" for n in json.load(f)["nodes"])
    check(steps_seen == 3, "the three cycles recorded: %d" % steps_seen)
    check(o.get_resources_dir() is None, "no resources directory unless asked")
    o.set_extra_resource_collection(True)
    want = os.path.join(tmp, "p27_resources")
    check(o.get_resources_dir() == want and os.path.isdir(want), "the resources directory")
    check(etr.torch.ExecutionTraceObserver.get_resources_dir_for_et_path(
        os.path.join(tmp, "none.json")) is None, "no directory for another trace")
    os.environ["ENABLE_PYTORCH_EXECUTION_TRACE"] = "1"
    try:
        env_o = etr.torch.ExecutionTraceObserver.build_execution_trace_obs_from_env()
    finally:
        del os.environ["ENABLE_PYTORCH_EXECUTION_TRACE"]
    if check(env_o is not None and env_o.is_registered, "an observer from the environment"):
        env_path = env_o.get_output_file_path()
        env_o.unregister_callback()
        check(env_path.endswith(".et.json") and os.path.exists(env_path), "its file: %r" % env_path)
        os.unlink(env_path)
    check(etr.torch.ExecutionTraceObserver.build_execution_trace_obs_from_env() is None,
          "none without the variable")


def rf_ids(nodes, view):
    """aten op name by rf_id (PyTorch's nodes hold it in a field or an attr)."""
    out = {}
    for n in nodes:
        rf = n.get("rf_id")
        for a in n.get("attrs", ()):
            if a["name"] == "rf_id":
                rf = a["value"]
        if rf is not None and n["name"].startswith("aten::"):
            out[rf] = n["name"]
    return out


def same_rf_ids(tool, tmp, steps):
    """Both observers on the same ops at once: every op has PyTorch's rf_id (its
    RecordFunction handle, which Kineto writes as "Record function id"), so that a Kineto
    trace links to etr's as to PyTorch's (before, etr numbered ops itself)."""
    eg_path, et_path = os.path.join(tmp, "both_eg.json"), os.path.join(tmp, "both_et.json")
    eg = ExecutionGraphObserver()
    eg.register_callback(eg_path)
    with etr.torch.trace(et_path):
        eg.start()
        run_threads(steps)
        eg.stop()
    eg.unregister_callback()
    validate(tool, et_path)
    with open(eg_path) as f:
        theirs = rf_ids(json.load(f)["nodes"], eg_view)
    with open(et_path) as f:
        ours = rf_ids(json.load(f)["nodes"], et_view)
    check(len(ours) > 100 and ours == theirs,
          "the same rf_id for the same op as PyTorch's observer: %d ops, %d the same" %
          (len(ours), sum(1 for k in ours if theirs.get(k) == ours[k])))


def failed_ops(tool, tmp):
    """An op an exception leaves (PyTorch ends its record while the exception unwinds) is
    marked etr_failed, with no outputs; so are the ops it was inside of that the exception
    left too, and nothing else (before, a failed op looked like one that returned nothing,
    and a replay ran it again)."""
    path = os.path.join(tmp, "failed.json")
    a, b = torch.randn(2, 3), torch.randn(4, 5)
    with etr.torch.trace(path):
        a.relu()
        try:
            torch.nn.functional.linear(a, b)  # aten::linear > aten::matmul > aten::mm raises
        except RuntimeError:
            pass
        a.sigmoid()
    validate(tool, path)
    with open(path) as f:
        nodes = json.load(f)["nodes"]
    failed = {n["name"] for n in nodes if any(x["name"] == "etr_failed" and x["value"]
                                              for x in n.get("attrs", []))}
    check("aten::mm" in failed and "aten::linear" in failed,
          "the op that raised and the op it was in are marked failed: %r" % sorted(failed))
    check(not failed & {"aten::relu", "aten::sigmoid"}, "ops that returned are not: %r" %
          sorted(failed))
    mm = [n for n in nodes if n["name"] == "aten::mm"]
    check(len(mm) == 1 and not mm[0]["outputs"]["values"], "a failed op has no outputs")


def compare(eg_nodes, et_nodes, label):
    """PyTorch's nodes against one etr trace's; returns (ops compared, etr tensors)."""

    def ck(cond, msg):
        check(cond, "%s: %s" % (label, msg))

    a, b = ops_by_thread(eg_nodes, eg_view), ops_by_thread(et_nodes, et_view)
    ck(len(a) == 2 and len(b) == 2, "2 threads in each: %d, %d" % (len(a), len(b)))
    fwd, n_ops = {}, 0
    for ta, tb in zip(a, b):
        names_a, names_b = [x["name"] for x in ta], [x["name"] for x in tb]
        if names_a != names_b:
            first = next((i for i, (p, q) in enumerate(zip(names_a, names_b)) if p != q),
                         min(len(names_a), len(names_b)))
            ck(False, "op sequences differ at %d: %s vs %s (%d vs %d ops)" % (
                first, names_a[first:first + 3], names_b[first:first + 3], len(names_a),
                len(names_b)))
            continue
        for x, y in zip(ta, tb):
            n_ops += 1
            ck(x["in"] == y["in"], "%s: inputs %r vs %r" % (x["name"], x["in"], y["in"]))
            ck(x["out"] == y["out"], "%s: outputs %r vs %r" % (x["name"], x["out"], y["out"]))
            ck(len(x["tensors"]) == len(y["tensors"]), "%s: tensor count" % x["name"])
            for p, q in zip(x["tensors"], y["tensors"]):
                # (keyed by thread too: PyTorch's ids alias, within a thread and across)
                if fwd.setdefault(q, p) != p:
                    ck(False, "%s: etr's tensor %d is PyTorch's %d here, and was %d before"
                          % (x["name"], q, p, fwd[q]))
    ck(n_ops > 200, "enough ops compared: %d" % n_ops)
    et_forms = tensor_forms(et_nodes, lambda n: n["inputs"]["values"] + n["outputs"]["values"])
    eg_forms = tensor_forms(eg_nodes, lambda n: n.get("inputs", []) + n.get("outputs", []))
    aliased = sorted(t for t, f in et_forms.items() if len(f) > 1)
    ck(not aliased, "etr tensor ids standing for several tensors: %r" % aliased[:5])
    eg_aliased = sum(1 for f in eg_forms.values() if len(f) > 1)
    print("PyTorch's observer: %d of %d tensor ids stand for several tensors; etr: %d of %d" %
          (eg_aliased, len(eg_forms), len(aliased), len(et_forms)))
    ck(any(x["name"].endswith("Backward0") for tb in b for x in tb), "backward ops recorded")
    return n_ops, len(fwd)


if __name__ == "__main__":
    sys.exit(main())
