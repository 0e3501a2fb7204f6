import re, sys
# print waits on scoreboards that have pending long-latency memory ops (LDG/ATOM/LDL/LDS/RED...), linear order
f, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pend = {b: [] for b in range(6)}
mem = re.compile(r'(LDG|ATOMG|ATOM|LDL|LDS|RED|LD\.|ACQBULK|STL|STG|STS|BAR)')
for l in open(f):
    m = re.match(r'\s*(\d+) (\w+)  (.{18}) s(\d+)\s+(.*)', l.rstrip('\n'))
    if not m: continue
    n = int(m.group(1))
    if n < lo or n > hi: continue
    tag, ins = m.group(3), m.group(5)
    w = re.search(r'w\[(\d+)\]', tag)
    if w:
        hit = []
        for b in w.group(1):
            b = int(b)
            if any(mem.search(x[1]) and not x[1].split()[0].startswith(('STG','STL','STS')) or 'STL' in x[1] for x in pend[b]):
                hit += [(b, x) for x in pend[b]]
            pend[b] = []
        loads = [(b, x) for b, x in hit if re.search(r'LDG|ATOM|LDL|LDS', x[1])]
        if loads:
            print('%4d WAIT %-45s <- %s' % (n, ins[:45], '; '.join('SB%d:%d %s' % (b, x[0], x[1].split()[0]) for b, x in loads)))
    for kind, b in re.findall(r'([WR])(\d)', tag):
        pend[int(b)].append((n, ins))
