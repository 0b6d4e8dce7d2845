#!/usr/bin/env python3
"""etr validate's scan of conforming nodes (src/json/reader_lean.c) against its general path.

`etr validate` hands the reader rd_options.conform: a node of our writer's shape that
conforms comes without its tree, checked while scanned. VALIDATE_GENERAL is validate compiled
without it (every node read into its tree and checked there, as before the scan). Both must
print the same and exit the same on: our traces (default, with tracebacks, schema 1.1.0), the
golden file, the real traces, and randomly mangled copies of ours (values, types, strings, attrs
and keys changed, elements dropped or repeated, separators changed, bytes flipped, cut),
with and without --strict and with a small --max. The golden file and the uncompressed real
traces are mangled too.

usage: test_validate_conform.py ETR VALIDATE_GENERAL EXAMPLE_RUNTIME OUTDIR GOLDEN [REAL_DIR]
       [--count N] [--seed S]
"""
import os
import random
import re
import subprocess
import sys

NUMS = [b'-1', b'0', b'1', b'1.5', b'1e3', b'-0', b'01', b'99999999999999999999',
        b'9223372036854775807', b'9223372036854775808', b'123456789012345678',
        b'1234567890123456789', b'"x"', b'true', b'null', b'[]', b'[1]', b'{}', b'-5', b'2',
        b'1E+2', b'0.0', b'"nan"', b'"inf"']
STRS = [b'"Int"', b'"Double"', b'"Bool"', b'"None"', b'"String"', b'"Device"', b'"<None>"',
        b'"nan"', b'"-inf"', b'""', b'"GenericList[Int]"', b'"GenericList[Int,Int]"',
        b'"Tuple[Int,Double]"', b'"Tensor(float)"', b'"GenericList[Tensor(float),Int]"',
        b'"GenericList[]"', b'"Tuple[]"', b'"Object"', b'"rf_id"', b'"fw_parent"', b'"seq_id"',
        b'"scope"', b'"tid"', b'"fw_tid"', b'"op_schema"', b'"kernel_backend"',
        b'"kernel_file"', b'"traceback"', b'"cat"', b'"name"', b'"id"', b'"stream"',
        b'"parent"', b'"inputs"', b'"outputs"', b'"uint64"', b'"int64"', b'"string"',
        b'"a\\u0000b"', b'"caf\xc3\xa9"', b'"x\\"y"', b'"\xff"',
        b'"[pytorch|profiler|execution_trace|thread]"',
        b'"[pytorch|profiler|execution_trace|process]"', b'"values"', b'"shapes"', b'"types"',
        b'"strides"', b'"ts"', b'"attrs"', b'"ctrl_deps"', b'1', b'[]', b'"GenericList[Int"',
        b'"Tuple[Int,GenericList[Int,Int]]"']
SWAPS = [(b'"ts"', b'"id"'), (b'"inputs"', b'"outputs"'), (b'"shapes"', b'"strides"'),
         (b'"name"', b'"ctrl_deps"'), (b'"value"', b'"type"')]
TOK_NUM = re.compile(rb'-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?')
TOK_STR = re.compile(rb'"(?:[^"\\]|\\.)*"')
TOK_ARR = re.compile(rb'\[[^\[\]]*\]')
TOK_ATTR = re.compile(rb'\{"name": [^{}]*\}')


def pick(rnd, rx, t):
    """One match of rx near a random place of t (or None)."""
    m = rx.search(t, rnd.randrange(len(t)))
    return m or rx.search(t)


def split_top(body):
    """The top-level elements of an array's text (without its brackets)."""
    out, depth, start, in_str, esc = [], 0, 0, False, False
    for i, c in enumerate(body):
        if in_str:
            if esc:
                esc = False
            elif c == 0x5c:
                esc = True
            elif c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c in b'[{':
            depth += 1
        elif c in b']}':
            depth -= 1
        elif c == 0x2c and depth == 0:
            out.append(body[start:i])
            start = i + 1
    out.append(body[start:])
    return out


def array_at(t, i):
    """The end of the array whose '[' is at i (or -1)."""
    depth, in_str, esc = 0, False, False
    for j in range(i, len(t)):
        c = t[j]
        if in_str:
            if esc:
                esc = False
            elif c == 0x5c:
                esc = True
            elif c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c == 0x5b:
            depth += 1
        elif c == 0x5d:
            depth -= 1
            if depth == 0:
                return j + 1
    return -1


def mutate_part(rnd, t):
    """One element of a node's "values", "shapes", "types" or "strides" replaced."""
    key = rnd.choice([b'"values": [', b'"types": [', b'"shapes": [', b'"strides": ['])
    i = t.find(key, rnd.randrange(len(t)))
    if i < 0:
        return t
    a = i + len(key) - 1
    b = array_at(t, a)
    if b < 0 or b - a <= 2:
        return t
    items = split_top(t[a + 1:b - 1])
    j = rnd.randrange(len(items))
    if key == b'"types": [':
        items[j] = rnd.choice(STRS)
    elif rnd.random() < 0.5:
        items[j] = rnd.choice(NUMS + STRS)
    else:  # one of its own elements, when it is an array
        inner = items[j]
        if inner.startswith(b'[') and len(inner) > 2:
            parts = split_top(inner[1:-1])
            op, at = rnd.randrange(3), rnd.randrange(len(parts))
            if op == 0:
                parts[at] = rnd.choice(NUMS + STRS)
            elif op == 1:
                del parts[at]
            else:
                parts.insert(at, parts[at])
            items[j] = b'[' + b','.join(parts) + b']'
        else:
            items[j] = rnd.choice([b'[]', b'[1]', b'[[],[]]', b'[1,2]'])
    return t[:a + 1] + b','.join(items) + t[b - 1:]


def mutate(rnd, t):
    k = rnd.randrange(22)
    if k >= 14:
        return mutate_part(rnd, t)
    n = len(t)
    if k == 0:  # cut
        return t[:rnd.randrange(n)]
    if k == 1:  # a byte changed
        i = rnd.randrange(n)
        return t[:i] + bytes([rnd.randrange(256)]) + t[i + 1:]
    if k == 2:  # bytes deleted
        i = rnd.randrange(n)
        return t[:i] + t[i + rnd.randrange(1, 40):]
    if k == 3:  # a span repeated
        i = rnd.randrange(n)
        j = min(n, i + rnd.randrange(1, 300))
        return t[:j] + t[i:j] + t[j:]
    if k in (4, 5):
        m = pick(rnd, TOK_NUM, t)
        if m:
            return t[:m.start()] + rnd.choice(NUMS) + t[m.end():]
    if k in (6, 7, 8):
        m = pick(rnd, TOK_STR, t)
        if m:
            return t[:m.start()] + rnd.choice(STRS) + t[m.end():]
    if k == 9:  # an array's elements dropped, repeated, added to or shuffled
        m = pick(rnd, TOK_ARR, t)
        if m:
            inner = m.group()[1:-1].split(b',')
            op = rnd.randrange(4)
            if op == 0 and inner:
                del inner[rnd.randrange(len(inner))]
            elif op == 1 and inner:
                inner.insert(rnd.randrange(len(inner) + 1), rnd.choice(inner))
            elif op == 2:
                inner.append(rnd.choice(NUMS + STRS))
            else:
                rnd.shuffle(inner)
            return t[:m.start()] + b'[' + b','.join(inner) + b']' + t[m.end():]
    if k == 10:  # an attr repeated, dropped or with a key renamed
        m = pick(rnd, TOK_ATTR, t)
        if m:
            op = rnd.randrange(3)
            if op == 0:
                return t[:m.end()] + b',' + m.group() + t[m.end():]
            if op == 1:
                return t[:m.start()] + t[m.end() + 1:]
            return t[:m.start()] + m.group().replace(b'"type"', b'"typ"') + t[m.end():]
    if k == 11:  # a separator written another way
        j = t.find(b', "', rnd.randrange(n))
        if j >= 0:
            return t[:j] + rnd.choice([b',  "', b',"', b' , "', b',\n"']) + t[j + 3:]
    if k == 12:  # a key renamed to another one
        i = rnd.randrange(n)
        a, b = rnd.choice(SWAPS)
        j = t.find(a, i)
        if j >= 0:
            return t[:j] + b + t[j + len(a):]
    if k == 13:
        for _ in range(3):
            t = mutate(rnd, t)
    return t


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout, p.stderr


def main():
    args = sys.argv[1:]
    count, seed = 400, 14
    if '--count' in args:
        i = args.index('--count')
        count = int(args[i + 1])
        del args[i:i + 2]
    if '--seed' in args:
        i = args.index('--seed')
        seed = int(args[i + 1])
        del args[i:i + 2]
    etr, general, example, out, golden = args[:5]
    real = args[5] if len(args) > 5 else None
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ)
    env.pop('ETR_READER_BACKEND', None)  # the scan is the hand backend's
    os.environ.clear()
    os.environ.update(env)
    bases = []
    for name, extra in (('plain', []), ('traceback', ['--threads', '2', '--traceback']),
                        ('schema110', ['--schema', '1.1.0'])):
        path = os.path.join(out, name + '.json')
        subprocess.run([example, '--out', path, '--iters', '1'] +
                       (extra if '--threads' in extra else ['--threads', '1'] + extra),
                       check=True, stdout=subprocess.DEVNULL)
        bases.append(path)
    files = bases + [golden]
    if real and os.path.isdir(real):
        files += sorted(os.path.join(real, f) for f in os.listdir(real)
                        if f.endswith('.json') or f.endswith('.json.gz'))
    failures = 0

    def compare(path, what):
        nonlocal failures
        for opts in ([], ['--strict'], ['--max', '3']):
            a = run([etr, 'validate'] + opts + [path])
            b = run([general] + opts + [path])
            if a != b:
                failures += 1
                print(f'DIFFERS: {what} {opts}:\n  etr validate: {a}\n  general:      {b}')
                return

    for f in files:
        compare(f, f)
    rnd = random.Random(seed)
    # the golden file and the real traces too (PyTorch's shape: whitespace between a node's
    # keys, no strides before schema 1.1.1; the real ones when they are there), uncompressed
    texts = [open(b, 'rb').read() for b in bases + [f for f in files[len(bases):]
                                                     if f.endswith('.json')]]
    mangled = os.path.join(out, 'mangled.json')
    for i in range(count):
        t = mutate(rnd, texts[rnd.randrange(len(texts))])
        with open(mangled, 'wb') as fh:
            fh.write(t)
        before = failures
        compare(mangled, f'mangled #{i}')
        if failures > before:
            keep = os.path.join(out, f'differs-{i}.json')
            os.replace(mangled, keep)
            print(f'  kept as {keep}')
    print(f'{len(files)} traces and {count} mangled ones (seed {seed}): {failures} differing')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
