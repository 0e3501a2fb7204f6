# sassdiff.py A.sass B.sass: per kernel (the template argument Ahead = false dropped from B's names),
# whether the instruction text is identical (addresses and encodings ignored).
import re, sys
def kernels(path, strip_ahead):
    out, cur = {}, None
    for l in open(path):
        if 'Function :' in l:
            cur = l.split('Function :')[1].strip()
            if strip_ahead:  # mamba2_agent / gdn_agent < ..., Split, Ahead = false >: drop the last bool
                cur = re.sub(r'(ELi\d+ELb[01]ELb[01])ELb0(EE)', r'\1\2', cur)
            out[cur] = []
            continue
        m = re.match(r'\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;', l)
        if m and cur: out[cur].append(re.sub(r'\s+', ' ', m.group(1)))
    return out
a, b = kernels(sys.argv[1], False), kernels(sys.argv[2], True)
for k in sorted(set(a) | set(b)):
    short = re.sub(r'_ZN9replayssm6detail', '', k)[:30] + '...' + k[-60:]
    if k not in a: print('NEW      ', len(b[k]), short)
    elif k not in b: print('GONE     ', len(a[k]), short)
    else: print('IDENTICAL' if a[k] == b[k] else 'DIFFERENT', len(a[k]), len(b[k]), short)
