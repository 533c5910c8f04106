#!/usr/bin/env python3
# Fails (exit 1) on an #include that goes against scripts/layers.txt: a lower
# layer including a higher one, or a public-only folder including an internal header.
import os, re, shutil, subprocess, sys, tempfile

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')

if len(sys.argv) > 2 and sys.argv[2] == '--self-test':
    # The check must catch what it exists for: a copy of the rules over a tree
    # with one upward include, one include of a folder that is no layer, and
    # one internal include from a public-only folder.
    with tempfile.TemporaryDirectory() as t:
        os.makedirs(os.path.join(t, 'scripts'))
        shutil.copy(os.path.join(root, 'scripts', 'layers.txt'), os.path.join(t, 'scripts'))
        files = {'base/a.cc': '#include "vm/interpreter.h"\n#include "kiln/error.h"\n',
                 'jit/b.cc': '#include "nowhere/x.h"\n#include "ops/registry.h"\n',
                 'samples/c.cc': '#include "kiln/vm.h"\n#include "jit/kernel.h"\n'}
        for f, text in files.items():
            os.makedirs(os.path.join(t, os.path.dirname(f)), exist_ok=True)
            open(os.path.join(t, f), 'w').write(text)
        r = subprocess.run([sys.executable, __file__, t], capture_output=True, text=True)
        want = ['base/a.cc:1: base includes "vm/interpreter.h" of vm', 'jit/b.cc:1: includes "nowhere/x.h"',
                'samples/c.cc:2: includes internal header "jit/kernel.h"', '3 files checked, 3 layer violation(s)']
        missing = [w for w in want if w not in r.stdout]
        if r.returncode != 1 or missing:
            sys.exit(f'self-test failed (exit {r.returncode}); missing {missing} in:\n{r.stdout}{r.stderr}')
    print('self-test passed')
    sys.exit(0)
rules = open(os.path.join(root, 'scripts', 'layers.txt')).read().splitlines()

owner = {}      # path prefix (folder/ or include/kiln/x.h) -> layer
deps = {}       # layer -> direct dependencies
public_only = []
for n, line in enumerate(rules, 1):
    line = line.split('#', 1)[0].strip()
    if not line:
        continue
    if m := re.fullmatch(r'layer (\w+):\s*(.*)', line):
        deps.setdefault(m[1], set())
        for p in m[2].split():
            owner[p] = m[1]
    elif m := re.fullmatch(r'(\w+)\s*->\s*(.*)', line):
        deps.setdefault(m[1], set()).update(m[2].split())
    elif m := re.fullmatch(r'public-only:\s*(.*)', line):
        public_only += m[1].split()
    else:
        sys.exit(f'scripts/layers.txt:{n}: cannot read: {line}')

for layer, ds in deps.items():
    for d in ds:
        if d not in deps:
            sys.exit(f'scripts/layers.txt: {layer} -> {d}: no such layer')

def below(layer, seen=None):
    seen = set() if seen is None else seen
    for d in deps[layer]:
        if d not in seen:
            seen.add(d)
            below(d, seen)
    return seen

def layer_of(path):
    """The layer a repository path belongs to, or None."""
    if path in owner:
        return owner[path]
    # The longest folder prefix wins: compiler/onnx/ is a layer inside compiler/.
    best = None
    for prefix, layer in owner.items():
        if prefix.endswith('/') and path.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, layer)
    return best[1] if best else None

allowed = {l: below(l) | {l} for l in deps}
# A layer must not reach itself through its arrows.
for l in deps:
    if l in below(l):
        sys.exit(f'scripts/layers.txt: the arrows from {l} come back to it')

violations, checked = [], 0
include = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
for dirpath, dirnames, filenames in os.walk(root):
    rel_dir = os.path.relpath(dirpath, root)
    dirnames[:] = [d for d in dirnames if not d.startswith(('.', 'build'))]
    for f in filenames:
        if not f.endswith(('.h', '.cc', '.def')):
            continue
        rel = os.path.normpath(os.path.join(rel_dir, f))
        mine = layer_of(rel)
        restricted = any(rel.startswith(p) for p in public_only)
        if mine is None and not restricted:
            continue
        checked += 1
        for n, text in enumerate(open(os.path.join(dirpath, f), errors='replace'), 1):
            m = include.match(text)
            if not m:
                continue
            target = m[1]
            resolved = 'include/' + target if target.startswith('kiln/') else target
            if restricted:
                if not target.startswith('kiln/') and not os.path.exists(os.path.join(dirpath, target)):
                    violations.append(f'{rel}:{n}: includes internal header "{target}"; only kiln/... is public')
                continue
            theirs = layer_of(resolved)
            if theirs is None:
                if os.path.exists(os.path.join(dirpath, target)):
                    continue  # a file beside this one
                violations.append(f'{rel}:{n}: includes "{target}", which belongs to no layer')
            elif theirs not in allowed[mine]:
                violations.append(f'{rel}:{n}: {mine} includes "{target}" of {theirs}, a layer above it')

for v in violations:
    print(v)
if checked == 0:
    sys.exit('no files checked: wrong root?')
print(f'{checked} files checked, {len(violations)} layer violation(s)')
sys.exit(1 if violations else 0)
