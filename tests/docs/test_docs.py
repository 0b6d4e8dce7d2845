#!/usr/bin/env python3
"""The docs against the code they describe (ctest docs.*): cheap checks that catch drift.

  test_docs.py api    ROOT                   every public function of include/etr/*.h is in
                                             docs/API.md, every error code in its "Errors",
                                             every ETR_* variable the library reads in it;
                                             every option() of CMakeLists.txt in README.md,
                                             and its package list is scripts/lib.sh's
  test_docs.py cli    ROOT ETR EXAMPLE       every command of `etr --help` has its section in
                                             docs/CLI.md and a line in README.md's command
                                             block; every option a command's --help names is
                                             in its section, and every option its
                                             synopses there show is in --help; every option
                                             of `etr-example-runtime --help` in
                                             examples/README.md
  test_docs.py readme ROOT ETR CC INCDIR LIB README.md's "API in ten lines", compiled as
                                             written (with `in` and `run()` defined around
                                             it), run, and its trace valid (etr validate
                                             --strict) with the op it records
"""
import json
import os
import re
import subprocess
import sys
import tempfile

FAILS = []


def fail(msg):
    FAILS.append(msg)
    print("FAIL: " + msg)


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()


def section(text, heading):
    """The text of '## heading' up to the next '## ' heading ('' when absent)."""
    m = re.search(r"^## " + re.escape(heading) + r"\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1) if m else ""


def public_functions(root):
    """Names of the functions include/etr/*.h declares for users: ETR_API ones and the
    static inline ones, without the etr__ internals the inline ones call."""
    names = set()
    incdir = os.path.join(root, "include", "etr")
    for h in sorted(os.listdir(incdir)):
        if not h.endswith(".h"):
            continue
        text = read(root, os.path.join("include", "etr", h))
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        for m in re.finditer(r"^(?:ETR_API|static inline)\b[^;{(]*?\b(etr_[a-z0-9][a-z0-9_]*)\s*\(",
                             text, re.M):
            names.add(m.group(1))
    return names


def vars_read(root, dirs):
    """The ETR_* variables the C files under dirs (relative to root) read."""
    found = set()
    for sub in dirs:
        for d, _, files in os.walk(os.path.join(root, sub)):
            for f in files:
                if f.endswith((".c", ".h")):
                    with open(os.path.join(d, f), encoding="utf-8", errors="replace") as fh:
                        for m in re.finditer(
                                r'getenv\("(ETR_[A-Z_]+)"\)|env_[a-z_]+\("(ETR_[A-Z_]+)"',
                                fh.read()):
                            found.add(m.group(1) or m.group(2))
    return found


def check_api(root):
    api = read(root, "docs/API.md")
    names = public_functions(root)
    if len(names) < 40:
        fail("found only %d public functions in include/etr/*.h (parse error?)" % len(names))
    ref = section(api, "Function reference")
    if not ref:
        fail('docs/API.md has no "## Function reference" section')
    for n in sorted(names):
        if not re.search(r"`" + n + r"\(", ref):
            fail("docs/API.md, Function reference: %s (include/etr) is not described" % n)
    # Every error code of etr/common.h's ETR_ERRNO_MAP, in the Errors section.
    common = read(root, "include/etr/common.h")
    codes = re.findall(r"X\((E[A-Z]+), -\d+,", common)
    if len(codes) < 10:
        fail("found only %d error codes in include/etr/common.h" % len(codes))
    errors = section(api, "Errors")
    for c in codes:
        if "`ETR_%s`" % c not in errors:
            fail('docs/API.md, "Errors": ETR_%s (etr/common.h) is not listed' % c)
    # Every ETR_* variable the library reads (the observer and the unwinder; the trace
    # reader's and the etr command's are docs/CLI.md's, checked by the cli part).
    read_vars = vars_read(root, ["src/observer", "src/unwind"])
    if "ETR_TRACE" not in read_vars:
        fail("found no ETR_TRACE read in src/ (parse error?)")
    for v in sorted(read_vars):
        if not re.search(r"`" + v + r"[=`]", api):
            fail("docs/API.md: the variable %s (read by libetr) is not described" % v)
    # Every build option of the top-level CMakeLists.txt, in README.md's "Build and install".
    readme = section(read(root, "README.md"), "Build and install")
    cm = read(root, "CMakeLists.txt")
    opts = set(re.findall(r"^\s*option\((ETR_[A-Z_]+)", cm, re.M))
    opts |= set(re.findall(r"^\s*set\((ETR_SANITIZE) ", cm, re.M))
    if len(opts) < 8:
        fail("found only %d option()s in CMakeLists.txt (parse error?)" % len(opts))
    for o in sorted(opts):
        if "`%s`" % o not in readme:
            fail('README.md, "Build and install": the build option %s is not listed' % o)
    # The packages README.md says the scripts install are scripts/lib.sh's ETR_PACKAGES.
    lib = re.search(r"ETR_PACKAGES=\((.*?)\)", read(root, "scripts/lib.sh"), re.S)
    listed = re.search(r"\(`(build-essential[^`]*)`", read(root, "README.md"))
    if not lib or not listed:
        fail("no package list in scripts/lib.sh or README.md (parse error?)")
    elif set(lib.group(1).split()) != set(listed.group(1).split()):
        fail("README.md's package list differs from scripts/lib.sh's ETR_PACKAGES: only in "
             "lib.sh %s, only in README %s" % (sorted(set(lib.group(1).split()) -
                                                      set(listed.group(1).split())),
                                               sorted(set(listed.group(1).split()) -
                                                      set(lib.group(1).split()))))
    print("api: %d functions, %d error codes, %d variables, %d build options" %
          (len(names), len(codes), len(read_vars), len(opts)))


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120, **kw)


def check_cli(root, etr, example):
    cli = read(root, "docs/CLI.md")
    readme = read(root, "README.md")
    top = run([etr, "--help"])
    if top.returncode != 0:
        fail("etr --help exited %d" % top.returncode)
    cmds = re.findall(r"^  ([a-z]+)  ", top.stdout.split("commands:", 1)[-1], re.M)
    if len(cmds) < 8:
        fail("etr --help lists only %d commands (parse error?)" % len(cmds))
    block = re.search(r"## The `etr` command\n\n```sh\n(.*?)```", readme, re.S)
    block = block.group(1) if block else ""
    if not block:
        fail("README.md has no command block under \"The `etr` command\"")
    common = section(cli, "Common behaviour")
    if not common:
        fail('docs/CLI.md has no "## Common behaviour" section')
    n_opts = 0
    for c in cmds:
        sec = section(cli, c)
        if not sec:
            fail("docs/CLI.md has no '## %s' section (etr --help lists it)" % c)
            continue
        if not re.search(r"^etr " + c + r"\b", block, re.M):
            fail("README.md's command block has no `etr %s` line" % c)
        h = run([etr, c, "--help"])
        for line in re.findall(r"^(etr " + c + r"\b[^#\n]*)", block, re.M):
            for opt in set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", line)):
                if opt not in h.stdout:
                    fail("README.md's command block: `%s` shows %s, which etr %s --help "
                         "does not name" % (line.strip(), opt, c))
        if h.returncode != 0:
            fail("etr %s --help exited %d" % (c, h.returncode))
        first = h.stdout.splitlines()[0] if h.stdout else ""
        if not first.startswith("usage: etr " + c):
            fail("etr %s --help does not start with its usage line: %r" % (c, first))
        for opt in sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", h.stdout))):
            if opt == "--help":
                continue
            n_opts += 1
            pat = r"`[^`]*" + re.escape(opt) + r"\b"
            if not re.search(pat, sec) and not re.search(pat, common):
                fail("docs/CLI.md, '## %s': the option %s (etr %s --help) is not described"
                     % (c, opt, c))
        # The other way: an option a synopsis of the section (`etr CMD ...`) shows is one
        # the command's --help names (a documented option the command refuses is caught).
        for syn in re.findall(r"`(etr " + c + r"\b[^`]*)`", sec):
            for opt in set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", syn)):
                if opt not in h.stdout:
                    fail("docs/CLI.md, '## %s': `%s` shows %s, which etr %s --help does not "
                         "name" % (c, syn, opt, c))
    # The variables the etr command and its trace reader read.
    cli_vars = vars_read(root, ["tools", "src/json"])
    if "ETR_PROGRESS" not in cli_vars:
        fail("found no ETR_PROGRESS read in tools/ (parse error?)")
    for v in sorted(cli_vars):
        if not re.search(r"`" + v + r"[=`]", cli):
            fail("docs/CLI.md: the variable %s (read by the etr command) is not described" % v)
    # The example runtime's options, in examples/README.md.
    ex = read(root, "examples/README.md")
    eh = run([example, "--help"])
    ex_opts = sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", eh.stdout)))
    if len(ex_opts) < 5:
        fail("etr-example-runtime --help names only %d options" % len(ex_opts))
    for opt in ex_opts:
        if not re.search(r"`[^`]*" + re.escape(opt) + r"\b", ex) and \
                not re.search(r"\[" + re.escape(opt) + r"\b", ex):
            fail("examples/README.md: %s (etr-example-runtime --help) is not described" % opt)
    print("cli: %d commands, %d options; example runtime: %d options" % (len(cmds), n_opts,
                                                                        len(ex_opts)))


def check_readme(root, etr, cc, incdir, lib):
    readme = read(root, "README.md")
    m = re.search(r"## The API in ten lines\n\n```c\n(.*?)```", readme, re.S)
    if not m:
        fail('README.md has no C block under "The API in ten lines"')
        return
    lines = m.group(1).splitlines()
    includes = [ln for ln in lines if ln.startswith("#include")]
    body = [ln for ln in lines if not ln.startswith("#include")]
    prog = "\n".join(includes) + "\n" + (
        "static void run(void) {}\n"
        "int main(void) {\n"
        "  etr_value in[2];\n"
        "  in[0] = etr_value_int(1);\n"
        "  in[1] = etr_value_string(\"two\");\n") + "\n".join("  " + ln for ln in body) + \
        "\n  return 0;\n}\n"
    with tempfile.TemporaryDirectory(prefix="etr-docs-") as d:
        src = os.path.join(d, "ten_lines.c")
        exe = os.path.join(d, "ten_lines")
        with open(src, "w") as f:
            f.write(prog)
        lib = os.path.abspath(lib)
        libdir = os.path.dirname(lib)
        c = run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", incdir, src, "-o", exe,
                 lib, "-Wl,-rpath," + libdir, "-lpthread"])
        if c.returncode != 0:
            fail("README.md's ten lines do not compile:\n" + prog + c.stderr)
            return
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("ETR_"):
                del env[k]
        r = run([exe], cwd=d, env=env)
        if r.returncode != 0:
            fail("README.md's ten lines exited %d: %s" % (r.returncode, r.stderr))
            return
        trace = os.path.join(d, "trace.json")
        v = run([etr, "validate", "--strict", trace])
        if v.returncode != 0:
            fail("the ten lines' trace.json is not valid: " + v.stdout + v.stderr)
            return
        with open(trace) as f:
            t = json.load(f)
        ops = [n for n in t["nodes"] if n["name"] == "aten::add"]
        if len(ops) != 1 or len(ops[0]["inputs"]["values"]) != 2:
            fail("the ten lines' trace does not hold aten::add with its 2 inputs: %r" % ops)
    print("readme: the ten lines compile, run and record aten::add")


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    part, root = argv[1], argv[2]
    if part == "api":
        check_api(root)
    elif part == "cli":
        check_cli(root, argv[3], argv[4])
    elif part == "readme":
        check_readme(root, argv[3], argv[4], argv[5], argv[6])
    else:
        print("unknown part " + part)
        return 2
    if FAILS:
        print("%d problem(s)" % len(FAILS))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
