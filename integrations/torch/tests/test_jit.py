"""etr.torch with TorchScript (ctest torch.jit):

- an op run by the TorchScript interpreter is recorded with its own inputs and outputs, as
  PyTorch's observer writes it: the interpreter gives the callback its whole stack (values
  of earlier ops waiting to be used come first), and the op's are the last num_inputs() /
  num_outputs() of it.

usage: test_jit.py ETR_TOOL   (PYTHONPATH holds <build>/python); exit 77 = skipped
"""
import json
import os
import subprocess
import sys

try:
    import torch
    import etr.torch
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "tests", "pylib"))
from etr_checks import check, finish, scratch_dir  # noqa: E402


def validate_strict(tool, path):
    r = subprocess.run([tool, "validate", "--strict", path], capture_output=True, text=True)
    return check(r.returncode == 0, "etr validate --strict %s: %s%s" % (
        path, r.stdout[-500:], r.stderr[-500:]))


@torch.jit.script
def stacked(a, b):
    c = a * b
    e = (c > 0).type_as(c)  # (c stays on the interpreter's stack while gt and type_as run)
    return c, e


def nodes_of(path):
    with open(path) as f:
        return {n["id"]: n for n in json.load(f)["nodes"]}


def check_stack(tool, path):
    a = b = torch.ones(2, 3)
    for _ in range(3):  # (the profiling executor settles on its optimized graph)
        stacked(a, b)
    with etr.torch.trace(path):
        stacked(a, b)
    validate_strict(tool, path)
    got = {}
    for n in nodes_of(path).values():
        if n["name"] in ("aten::gt", "aten::type_as"):
            got.setdefault(n["name"], (n["inputs"]["types"], n["outputs"]["types"]))
    check(got.get("aten::gt") == (["Tensor(float)", "Int"], ["Tensor(bool)"]),
          "aten::gt's own inputs and outputs: %r" % (got.get("aten::gt"),))
    check(got.get("aten::type_as") == (["Tensor(bool)", "Tensor(float)"], ["Tensor(float)"]),
          "aten::type_as's own inputs and outputs: %r" % (got.get("aten::type_as"),))


def main():
    tool = sys.argv[1]
    tmp = scratch_dir("etr-torch-jit-")
    check_stack(tool, os.path.join(tmp, "stack.json"))
    return finish("jit: interpreter ops with their own values")


if __name__ == "__main__":
    sys.exit(main())
