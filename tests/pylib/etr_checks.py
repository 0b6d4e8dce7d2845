"""Checks shared by the Python tests (integrations/python/tests, integrations/torch/tests,
tests/analysis): a failed check is reported and counted and the test goes on, so one run
shows every failure; finish() turns the count into the exit status.

A test finds this module through its own path (tests/pylib), not through PYTHONPATH:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ..., "pylib"))
"""
import shutil
import subprocess
import sys
import tempfile

# The names of a trace's thread and process nodes (docs/FORMAT.md), for tests that build
# traces by hand.
THREAD = "[pytorch|profiler|execution_trace|thread]"
PROCESS = "[pytorch|profiler|execution_trace|process]"

failures = []
scratch = []


def check(cond, what):
    """Count `what` as a failure, and print it, unless cond; returns cond."""
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)
    return cond


def validate(tool, path):
    """check that `etr validate` (the etr command at tool) accepts the trace at path."""
    r = subprocess.run([tool, "validate", path], capture_output=True, text=True)
    return check(r.returncode == 0,
                 "etr validate %s: %s%s" % (path, r.stdout[-500:], r.stderr[-500:]))


def scratch_dir(prefix):
    """A fresh directory for the test's files: finish() removes it when every check passed
    and keeps it (and says where) when one failed."""
    d = tempfile.mkdtemp(prefix=prefix)
    scratch.append(d)
    return d


def finish(passed=None, rc=0):
    """The exit status: 1 after saying how many checks failed; else rc, after printing
    `passed` when given. Scratch directories go, unless a check failed."""
    if failures:
        print("%d check(s) failed" % len(failures), file=sys.stderr)
        for d in scratch:
            print("files kept in", d, file=sys.stderr)
        return 1
    for d in scratch:
        shutil.rmtree(d, ignore_errors=True)
    if passed is not None:
        print(passed)
    return rc


def run_cases(cases, passed):
    """Run each case (a function of no argument that checks); one that raises is a failure,
    not the end of the run. The exit status, as finish(passed) gives it."""
    for case in cases:
        try:
            case()
        except Exception as e:  # noqa: BLE001
            check(False, "%s raised %r" % (case.__name__, e))
    return finish(passed)
