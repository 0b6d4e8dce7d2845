"""python3 -m etr --torch (ctest torch.run_script): an unmodified PyTorch script, run under
etr from the command line, gets every op PyTorch runs recorded, on the threads it starts too;
without --torch the same script records none of them (the flag is what attaches etr.torch).

usage: test_run_script.py ETR_TOOL   (PYTHONPATH holds <build>/python); exit 77 = skipped
"""
import json
import os
import subprocess
import sys

try:
    import torch  # noqa: F401
    import etr.torch  # noqa: F401
except ImportError as e:  # no PyTorch here (Debian: python3-torch), or etr built without it
    print("skipped: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "tests", "pylib"))
from etr_checks import check, finish, scratch_dir, validate  # noqa: E402

SCRIPT = """
import sys, threading, torch
x = torch.randn(4, 4, requires_grad=True)
tids = []
def work():
    tids.append(threading.get_native_id())
    (x @ x).relu().sum().backward()
t = threading.Thread(target=work)
t.start()
t.join()
print("ran", sys.argv[1:], "worker", tids[0])
"""


def run(tool, tmp, name, flags):
    script, out = os.path.join(tmp, "train.py"), os.path.join(tmp, name)
    with open(script, "w") as f:
        f.write(SCRIPT)
    r = subprocess.run([sys.executable, "-m", "etr", "-o", out] + flags + [script, "a", "b"],
                       capture_output=True, text=True, env=os.environ)
    check(r.returncode == 0 and "ran ['a', 'b'] worker " in r.stdout,
          "python -m etr %s ran the script: %s %s" % (" ".join(flags), r.stdout, r.stderr))
    if r.returncode != 0:
        return None, 0
    validate(tool, out)
    with open(out) as f:
        return json.load(f)["nodes"], int(r.stdout.split("worker ")[1].split()[0])


def main():
    tool = sys.argv[1]
    tmp = scratch_dir("etr-run-script-")
    nodes, worker = run(tool, tmp, "torch.json", ["--torch"])
    if nodes is not None:
        threads = {n["id"]: n for n in nodes if n["name"].endswith("execution_trace|thread]")}
        names = {}
        for n in nodes:
            names.setdefault(n["name"], []).append(n)
        check("aten::mm" in names and "MmBackward0" in names,
              "aten ops and backward functions recorded: %r" % sorted(names)[:20])
        # the forward ops ran on the script's own thread, not the main one
        mm_thread = names.get("aten::mm", [{}])[0].get("ctrl_deps")
        while mm_thread not in threads and mm_thread is not None:
            parent = next((n for n in nodes if n["id"] == mm_thread), None)
            mm_thread = parent.get("ctrl_deps") if parent else None
        attrs = {a["name"]: a["value"] for a in threads.get(mm_thread, {}).get("attrs", [])}
        check(attrs.get("os_tid") == worker,
              "aten::mm under the thread node of the script's worker (%d): %r" % (worker, attrs))
    # Under ETR_TRACE, a script that imports etr.torch records PyTorch's ops as it is
    env_out = os.path.join(tmp, "env.json")
    env_script = os.path.join(tmp, "env_script.py")
    with open(env_script, "w") as f:
        f.write("import torch, etr.torch\ntorch.ones(2, 2).mm(torch.ones(2, 2))\n")
    r = subprocess.run([sys.executable, env_script], capture_output=True, text=True,
                       env=dict(os.environ, ETR_TRACE=env_out))
    check(r.returncode == 0, "ETR_TRACE + import etr.torch: %s" % r.stderr)
    if r.returncode == 0 and validate(tool, env_out):
        with open(env_out) as f:
            check(any(n["name"] == "aten::mm" for n in json.load(f)["nodes"]),
                  "under ETR_TRACE, importing etr.torch records PyTorch's ops")
    plain, _ = run(tool, tmp, "plain.json", [])
    if plain is not None:
        check(not any(n["name"].startswith("aten::") for n in plain),
              "without --torch no PyTorch op is recorded")
    return finish("python -m etr --torch: PyTorch's ops of an unmodified script, its threads' too")


if __name__ == "__main__":
    sys.exit(main())
