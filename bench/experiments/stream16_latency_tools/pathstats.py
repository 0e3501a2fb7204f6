import re, sys, subprocess
def kernels(fn):
    out = {}; cur = None
    for l in open(fn):
        if 'Function :' in l:
            cur = l.split('Function :')[1].strip(); out[cur] = []; continue
        m = re.match(r'\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;', l)
        if cur and m: out[cur].append(m.group(2))
    return out
a = kernels(sys.argv[1]); b = kernels(sys.argv[2])
def stats(ins):
    end = next(i for i, s in enumerate(ins) if re.match(r'EXIT\s*$', s.strip()))
    p = ins[:end + 1]
    return len(p), sum('STL' in s for s in p), sum('LDL' in s for s in p)
for k in sorted(a):
    if 'mamba2_stream_agent' not in k: continue
    d = subprocess.run(['c++filt', k], capture_output=True, text=True).stdout
    d = re.sub(r'.*rules::mamba2<(\d+), (\d+), __nv_bfloat16>, (\d+), (\d+), replayssm::precision::([^,]*(?:<[^>]*>)?), \d+, (\d+), 0>, (\w+)>.*', r'H\1 K\4 \5 NT\6 B=\7', d.strip())
    print('%-45s HEAD %s  patch %s' % (d, stats(a[k]), stats(b[k])))
