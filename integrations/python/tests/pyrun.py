"""What the Python package's script-running tests share (python.misuse, python.ranks): the
environment their scripts run in, a scratch directory, reading a trace's nodes."""
import json
import os
import subprocess
import sys
import textwrap
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "tests", "pylib"))
from etr_checks import scratch_dir  # noqa: E402

ENV = dict(os.environ)  # (PYTHONPATH: the build tree's package, made absolute for other cwds)
ENV["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in
                                    ENV.get("PYTHONPATH", "").split(os.pathsep) if p)
TMP = None


def setup(prefix):
    """The scratch directory of this test (removed at its end), which run_py writes to."""
    global TMP
    TMP = scratch_dir(prefix)
    return TMP


def load(path):
    with open(path) as f:
        return json.load(f)


def ops(path, name):
    return [n for n in load(path)["nodes"] if n["name"] == name]


def attr(n, name):
    for a in n["attrs"]:
        if a["name"] == name:
            return a["value"]
    return None


def run_py(code, *args, cwd=None, env=None):
    """Runs code (a script written to a file) with this Python, args before the script and
    env added to the environment; (returncode, stderr)."""
    script = os.path.join(TMP, "s_%d.py" % time.monotonic_ns())
    with open(script, "w") as f:
        f.write(textwrap.dedent(code))
    r = subprocess.run([sys.executable, *args, script], capture_output=True, text=True,
                       env=dict(ENV, **env) if env else ENV, cwd=cwd or TMP, timeout=120)
    return r.returncode, r.stderr
