"""python3 -m etr [-o TRACE] [--torch] [--python-calls] [--no-timing] script.py [args...]

Runs the script (or ``-m module``) as __main__ under an etr trace and writes TRACE
(default: etr-trace.json; ``%p`` in it becomes the process id). Ops are what the script
records (etr.record_function, @etr.annotate), with --torch every op PyTorch runs (aten ops,
autograd's backward functions, record_function scopes; on every thread, as etr.torch.trace
records them), and with --python-calls every Python function call of the main thread.
"""

import argparse
import os
import runpy
import sys

import etr


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m etr", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", default="etr-trace.json", metavar="TRACE",
                   help="trace file (.gz: gzip; %%p: the process id); default etr-trace.json")
    p.add_argument("--torch", action="store_true",
                   help="record PyTorch's ops too (etr.torch; needs etr built with libtorch)")
    p.add_argument("--python-calls", action="store_true",
                   help="record every Python function call of the main thread as an op")
    p.add_argument("--no-timing", action="store_true", help="leave out ts and durations")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python3 -m")
    p.add_argument("script", nargs="?", help="the script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    a = p.parse_args(argv)
    if not a.module and not a.script:
        p.error("no script or -m MODULE given")
    if a.module and a.script:
        a.args.insert(0, a.script)
    if a.torch:
        try:
            import etr.torch as etr_torch
        except ImportError as e:
            p.error("--torch: %s" % e)
    path = a.output.replace("%p", str(os.getpid()))
    target = a.module or a.script
    sys.argv = [target] + a.args
    code = 0
    tracer = etr_torch.trace if a.torch else etr.trace
    with tracer(path, timing=not a.no_timing, python_calls=a.python_calls) as t:
        try:
            if a.module:
                runpy.run_module(a.module, run_name="__main__", alter_sys=True)
            else:
                sys.path.insert(0, os.path.dirname(os.path.abspath(a.script)))
                runpy.run_path(a.script, run_name="__main__")
        except SystemExit as e:
            code = e.code
    st = t.stats
    print("etr: %s: %d nodes, %d bytes" % (path, st["nodes_written"], st["bytes_written"]),
          file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
