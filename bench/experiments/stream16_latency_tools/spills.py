import re, sys
# ptxas -v log -> {kernel: (regs, stack, spill_st, spill_ld)}
def parse(fn):
    out = {}; cur = None
    for l in open(fn):
        m = re.search(r"Function properties for (\S+)", l)
        if m: cur = m.group(1); continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", l)
        if m and cur: out.setdefault(cur, [None, *map(int, m.groups())]); continue
        m = re.search(r"Compiling entry function '(\S+)'", l)
        if m: cur = m.group(1); continue
        m = re.search(r"Used (\d+) registers", l)
        if m and cur in out: out[cur][0] = int(m.group(1))
    return out
a = parse(sys.argv[1]); b = parse(sys.argv[2])
flt = sys.argv[3] if len(sys.argv) > 3 else ''
import subprocess
def dm(k):
    return subprocess.run(['c++filt', k], capture_output=True, text=True).stdout.strip()
diff = 0
for k in sorted(set(a) | set(b)):
    if flt and flt not in k: continue
    if a.get(k) != b.get(k):
        diff += 1
        d = dm(k)
        d = re.sub(r'replayssm::', '', d)[:230]
        print(a.get(k), '->', b.get(k), d)
print('kernels', len(a), len(b), 'differing', diff)
