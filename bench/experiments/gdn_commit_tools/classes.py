import re, sys, collections
# classes.py ANN RANGES... : instruction classes over inclusive line ranges "a-b" of an ann.py listing
# (ranges may be prefixed "xN:" to weight them, e.g. 16x:2038-2065 for a loop body run 16 times)
f = sys.argv[1]
rs = []
for r in sys.argv[2:]:
    w = 1
    if ':' in r:
        w, r = r.split(':'); w = int(w.rstrip('x'))
    a, b = r.split('-'); rs.append((int(a), int(b), w))
cls = collections.Counter(); tot = 0
def klass(op):
    for k in ('FFMA', 'FMUL', 'FADD', 'LDS', 'STS', 'LDG', 'STG', 'LDL', 'STL', 'SHFL', 'BAR', 'MUFU', 'ATOM', 'LDGSTS'):
        if op.startswith(k): return k
    if op[0] in 'UI' or op in ('LEA', 'SHF', 'LOP3', 'MOV', 'SEL', 'ISETP', 'PLOP3', 'IMAD', 'IADD3', 'S2R', 'S2UR', 'R2UR', 'CS2R', 'LEA.HI'):
        return 'int/uniform/move'
    return 'other'
for l in open(f):
    m = re.match(r'\s*(\d+) (\w+)  (.{18}) s(\d+)\s+(@!?U?P\w+ )?(\S+)', l)
    if not m: continue
    k = int(m.group(1)); op = m.group(6)
    for a, b, w in rs:
        if a <= k <= b:
            cls[klass(op)] += w; tot += w
print('total', tot, ' '.join('%s %d' % kv for kv in cls.most_common()))
