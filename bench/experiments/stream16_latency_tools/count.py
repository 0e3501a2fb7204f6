import sys, re
# count.py file end excl_ranges... ; ranges "a-b" (inclusive) excluded; prints count and opcode classes
f, end = sys.argv[1], int(sys.argv[2])
ex = []
for r in sys.argv[3:]:
    a, b = r.split('-'); ex.append((int(a), int(b)))
n = 0; cls = {}
for l in open(f):
    m = re.match(r'\s*(\d+) (\w+)  (.{18}) s(\d+)\s+(@!?U?P\w+ )?(\S+)', l)
    if not m: continue
    k = int(m.group(1))
    if k > end or any(a <= k <= b for a, b in ex): continue
    n += 1
print(n)
