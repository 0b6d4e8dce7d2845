"""etr.torch with tensors and programs off the beaten path (ctest torch.odd): each case runs
under etr.torch.trace, and its trace must pass `etr validate --strict`.

- a tensor subclass whose sizes are Python code (__torch_dispatch__ with
  dispatch_sizes_strides_policy="sizes") that runs ops: their callbacks come while etr is
  still reading the outer op's values. Before, they overwrote them (the outer op was written
  with the inner ops' tensors); now the outer op has its own inputs and outputs. (PyTorch
  1.13's observer deadlocks on its own mutex here.)
- a tensor subclass that refuses its strides (dispatch_sizes_strides_policy="strides",
  raising NotImplementedError) to ops that never ask for them: etr asks, and PyTorch left
  the Python error set after etr caught it, so the traced program failed (SystemError,
  "returned a result with an exception set") where the untraced one runs. Now the error is
  dropped with the read; and the tensor keeps its shape (before, written without one, where
  PyTorch's observer, which reads no strides, has it), with contiguous strides.
- a Ctrl-C that comes while such strides code runs inside etr's read (a KeyboardInterrupt
  raised there): the program gets its KeyboardInterrupt, raised in the main thread at its
  next check as a Ctrl-C is. Before, it was dropped with the read's error, and the program
  ran on as if never interrupted.
- undefined tensors (the grads layer_norm's backward does not compute, an optional Tensor
  passed as an undefined one) have an id, one for all of them, as PyTorch's observer gives
  its one undefined tensor (before, id 0).
- tensor kinds the side-by-side training loop has none of, under PyTorch's observer and
  etr.torch.trace (skipped without PyTorch 1.13's ExecutionGraphObserver): the same ops in
  the same order, with the same shapes, types and tensors' offset, numel, item size and
  device; docs/TORCH.md lists the differences left out (tensors without storage, doubles).

usage: test_odd.py ETR_TOOL   (PYTHONPATH holds <build>/python); exit 77 = skipped
"""
import json
import os
import subprocess
import sys
import threading
import warnings

try:
    import torch
    import etr.torch
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "tests", "pylib"))
from etr_checks import check, run_cases, scratch_dir  # noqa: E402

TOOL = sys.argv[1] if len(sys.argv) > 1 else "etr"
TMP = scratch_dir("etr-torch-odd-")


def validate_strict(path):
    r = subprocess.run([TOOL, "validate", "--strict", path], capture_output=True, text=True)
    return check(r.returncode == 0, "etr validate --strict %s: %s%s" % (
        path, r.stdout[-500:], r.stderr[-500:]))


def nodes_of(path):
    with open(path) as f:
        return json.load(f)["nodes"]


def tensor_id(v):
    return v[0] if isinstance(v, list) and len(v) == 6 and isinstance(v[5], str) else None


class SizedByPython(torch.Tensor):
    """A wrapper whose sizes PyTorch asks of Python; answering runs ops (clone, addcmul)."""

    @staticmethod
    def __new__(cls, elem):
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), dtype=elem.dtype, device=elem.device,
            dispatch_sizes_strides_policy="sizes")
        r.elem = elem
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.sym_size, torch.ops.aten.size):
            e = args[0].elem.clone()
            return torch.addcmul(e, e, e, value=0.5).size()  # (more arguments than add)
        if func.overloadpacket in (torch.ops.aten.sym_stride, torch.ops.aten.stride):
            return args[0].elem.stride()

        def unwrap(x):
            return x.elem if isinstance(x, SizedByPython) else x

        out = func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in
                                                   (kwargs or {}).items()})
        return SizedByPython(out) if isinstance(out, torch.Tensor) else out


def sizes_in_python():
    path = os.path.join(TMP, "sizes.json")
    a = SizedByPython(torch.randn(3, 4))
    (a + a).relu()  # (warm: PyTorch's lazily made state)

    def work():  # (a new thread: its buffers are as small as they come)
        (a + a).relu()

    with etr.torch.trace(path):
        t = threading.Thread(target=work)
        t.start()
        t.join()
    validate_strict(path)
    nodes = nodes_of(path)
    by_id = {n["id"]: n for n in nodes}
    thread = [n for n in nodes if n["name"] == "[pytorch|profiler|execution_trace|thread]"]
    # the wrapper's add and relu: the ops of that thread's own level (the ops answering a
    # sizes query for an input run before the op begins, beside it)
    top = [n for n in nodes if by_id.get(n["ctrl_deps"]) in thread]
    adds = [n for n in top if n["name"] == "aten::add" and
            n["inputs"]["types"][:2] == ["Tensor(float)", "Tensor(float)"] and
            n["inputs"]["shapes"][1] == [3, 4]]
    relus = [n for n in top if n["name"] == "aten::relu"]
    if not check(len(adds) == 1 and len(relus) == 1, "one add of two [3, 4] tensors and one "
                 "relu at the top: %r" % [(n["name"], n["inputs"]["shapes"]) for n in top]):
        return
    add, relu = adds[0], relus[0]
    ins = [tensor_id(v) for v in add["inputs"]["values"][:2]]
    out = tensor_id(add["outputs"]["values"][0])
    made_inside = set()
    for n in nodes:
        if n["name"] in ("aten::clone", "aten::addcmul"):
            made_inside.update(tensor_id(v) for v in n["outputs"]["values"])
    check(ins[0] is not None and ins[0] == ins[1],
          "the add's two inputs are the one wrapper: %r" % add["inputs"]["values"])
    check(not made_inside & set(ins + [out]),
          "the add's tensors are not the sizes queries' (%r, %r)" % (ins, out))
    check(tensor_id(relu["inputs"]["values"][0]) == out,
          "relu takes the add's output: %r vs %r" % (relu["inputs"]["values"], out))
    check(add["outputs"]["shapes"] == [[3, 4]] and relu["outputs"]["shapes"] == [[3, 4]],
          "shapes: %r %r" % (add["outputs"]["shapes"], relu["outputs"]["shapes"]))


class NoStrides(torch.Tensor):
    """A wrapper whose strides are refused (its ops unwrap it and never ask); with ctrl_c
    set, the next query raises KeyboardInterrupt instead (a Ctrl-C that came while it ran)."""

    ctrl_c = False

    @staticmethod
    def __new__(cls, elem):
        r = torch.Tensor._make_wrapper_subclass(cls, elem.size(), dtype=elem.dtype,
                                                device=elem.device,
                                                dispatch_sizes_strides_policy="strides")
        r.elem = elem
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.sym_stride, torch.ops.aten.stride,
                                   torch.ops.aten.sym_storage_offset):
            if NoStrides.ctrl_c:
                NoStrides.ctrl_c = False
                raise KeyboardInterrupt("a Ctrl-C while the strides code ran")
            raise NotImplementedError("no strides here")

        def unwrap(x):
            return x.elem if isinstance(x, NoStrides) else x

        out = func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in
                                                   (kwargs or {}).items()})
        return NoStrides(out) if isinstance(out, torch.Tensor) else out


def strides_refused():
    path = os.path.join(TMP, "strides.json")
    a = NoStrides(torch.randn(3, 4))
    (a + a).relu()  # (runs untraced)
    try:
        with etr.torch.trace(path):
            b = (a + a).relu()
            c = b + 1
    except BaseException as e:  # noqa: BLE001
        check(False, "the traced program fails where the untraced one runs: %r" % e)
        return
    check(isinstance(c, NoStrides), "the ops' results: %r" % type(c))
    validate_strict(path)
    nodes = nodes_of(path)
    names = [n["name"] for n in nodes]
    check(names.count("aten::add") >= 2 and "aten::relu" in names, "the ops: %r" % names)
    # (the shape is not the strides': kept, as PyTorch's observer has it, strides contiguous)
    for n in nodes:
        if n["name"] in ("aten::add", "aten::relu"):
            check(n["inputs"]["shapes"][0] == [3, 4] and n["inputs"]["strides"][0] == [4, 1],
                  "%s keeps its input's shape: %r %r" % (n["name"], n["inputs"]["shapes"],
                                                          n["inputs"]["strides"]))


def ctrl_c_in_strides():
    path = os.path.join(TMP, "ctrl_c.json")
    a = NoStrides(torch.randn(3, 4))
    got = None
    with etr.torch.trace(path):
        NoStrides.ctrl_c = True
        try:
            for i in range(100):
                a + a
        except KeyboardInterrupt:
            got = i
    if not check(not NoStrides.ctrl_c, "etr asked the strides (the Ctrl-C's moment)"):
        NoStrides.ctrl_c = False
        return
    check(got is not None, "the program gets the KeyboardInterrupt raised in the strides code "
          "etr's read ran (not swallowed with the read's error)")
    validate_strict(path)


def undefined_tensors():
    path = os.path.join(TMP, "undefined.json")
    x = torch.randn(2, 3, requires_grad=True)
    with etr.torch.trace(path):
        torch.nn.functional.layer_norm(x, (3,)).sum().backward()  # (no weight, no bias)
    validate_strict(path)
    undefined, defined = set(), set()

    def walk(vals, types):
        for v, t in zip(vals, types):
            if t == "Tensor(nullptr (uninitialized))":
                undefined.add(v[0])
            elif t.startswith("Tensor("):
                defined.add(v[0])

    n_bw = 0
    for n in nodes_of(path):
        for k in ("inputs", "outputs"):
            walk(n[k]["values"], n[k]["types"])
        n_bw += n["name"] == "aten::native_layer_norm_backward"
    check(n_bw == 1, "one native_layer_norm_backward: %d" % n_bw)
    check(len(undefined) == 1 and 0 not in undefined and not undefined & defined,
          "one id, not 0, for the undefined tensors, no defined tensor's: %r" % undefined)


def kinds():
    """Tensors of many kinds through ops (none without storage: docs/TORCH.md)."""
    torch.manual_seed(0)
    for dt in (torch.bool, torch.half, torch.bfloat16, torch.uint8, torch.int8, torch.float64,
               torch.cfloat):
        t = torch.ones(3, dtype=dt)
        t + t if dt != torch.bool else t & t
    q = torch.quantize_per_tensor(torch.randn(4, 4), 0.1, 10, torch.quint8)
    q.dequantize()
    torch.empty(0, 3).sum()
    torch.tensor(3.0) * 2
    big = torch.ones([1] * 20 + [2])
    big.permute(list(range(20, -1, -1))).contiguous()
    a = torch.randn(4, 6)
    a[1:, ::2] + 1
    a.t().contiguous()
    torch.randn(3, 1).expand(3, 5) * 2
    torch.randn(2, 3, 4, 4).to(memory_format=torch.channels_last).relu()
    m = torch.empty(3, 4, device="meta")
    torch.mm(m, torch.empty(4, 2, device="meta"))
    torch.nn.functional.linear(torch.randn(2, 3), torch.randn(4, 3), None)
    with warnings.catch_warnings():  # (named tensors are experimental, PyTorch says)
        warnings.simplefilter("ignore")
        n = torch.randn(2, 3, names=("N", "C"))
    n.sum("C")
    o = torch.empty(3)
    torch.add(torch.ones(3), torch.ones(3), out=o)
    o.resize_(10)
    torch.sin(torch.ones(10), out=o)
    with torch.inference_mode():
        i = torch.randn(3)
        i.add_(1)
    x = torch.randn(2, 3, requires_grad=True)
    torch.nn.functional.layer_norm(x, (3,)).sum().backward()


def kinds_side_by_side():
    try:
        from torch.profiler import ExecutionGraphObserver
    except ImportError:
        print("kinds_side_by_side: skipped (no ExecutionGraphObserver in this PyTorch)")
        return
    eg_path, et_path = os.path.join(TMP, "kinds_eg.json"), os.path.join(TMP, "kinds.json")
    kinds()  # (warm: PyTorch's lazily made state)
    eg = ExecutionGraphObserver()
    eg.register_callback(eg_path)
    eg.start()
    kinds()
    eg.stop()
    eg.unregister_callback()
    with etr.torch.trace(et_path):
        kinds()
    validate_strict(et_path)

    def ops(path, tid_of, view):
        return [view(n) for n in nodes_of(path) if not n["name"].startswith(("[", "## "))
                and tid_of(n) is not None]

    def tensors(vals, out):
        for v in vals:
            if tensor_id(v) is not None:
                out.append(tuple(v[2:]))
            elif isinstance(v, list):
                tensors(v, out)
        return out

    def eg_view(n):
        return (n["name"], n["input_shapes"], n["input_types"], n["output_shapes"],
                n["output_types"], tensors(n["inputs"] + n["outputs"], []))

    def et_view(n):
        return (n["name"], n["inputs"]["shapes"], n["inputs"]["types"], n["outputs"]["shapes"],
                n["outputs"]["types"], tensors(n["inputs"]["values"] +
                                               n["outputs"]["values"], []))

    theirs = ops(eg_path, lambda n: n.get("tid"), eg_view)
    ours = ops(et_path, lambda n: 1, et_view)
    check([o[0] for o in ours] == [o[0] for o in theirs], "the same ops: %d vs %d" % (
        len(ours), len(theirs)))
    differ = [(a[0], a[1:], b[1:]) for a, b in zip(theirs, ours) if a != b]
    print("kinds_side_by_side: %d ops compared" % len(ours))
    check(len(ours) > 100 and not differ, "the same shapes, types and tensors in %d ops: %r"
          % (len(ours), differ[:3]))


if __name__ == "__main__":
    sys.exit(run_cases([sizes_in_python, strides_refused, ctrl_c_in_strides, undefined_tensors,
                       kinds_side_by_side], "odd tensors and programs"))
