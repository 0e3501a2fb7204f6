import re, sys
# live.py annotated_file point end : registers live at line `point` (linear scan of lines point..end,
# a register is live if read before written), approximate (branches ignored, predicated writes treated as writes
# only when unpredicated)
f, point, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = []
for l in open(f):
    m = re.match(r'\s*(\d+) (\w+)  (.{18}) s(\d+)\s+(.*)', l.rstrip('\n'))
    if m: rows.append((int(m.group(1)), m.group(5)))
def regs(tok, width):
    out = []
    for m in re.finditer(r'\bR(\d+)(\.64)?', tok):
        r = int(m.group(1)); w = 2 if m.group(2) else 1
        out += list(range(r, r + w))
    return out
state = {}
for n, ins in rows:
    if n < point or n > end: continue
    pred = ins.startswith('@')
    body = re.sub(r'^@!?P\w+\s+', '', ins)
    op = body.split()[0]
    args = body[len(op):].strip()
    ops = [a.strip() for a in args.split(',')] if args else []
    width = 4 if '.128' in op else 2 if '.64' in op or op.startswith('IMAD.WIDE') or op in ('LDC.64',) or 'WIDE' in op else 1
    no_dest = op.split('.')[0] in ('STG','STS','STL','ST','RED','BRA','EXIT','BAR','BSSY','BSYNC','CALL','RET','WARPSYNC','ACQBULK','DEPBAR','LDGDEPBAR','LDGSTS','ISETP','FSETP','PLOP3','R2P','BREAK','NOP','FCHK','MEMBAR','ERRBAR','CCTL')
    if op.startswith('ISETP') or op.startswith('FSETP') or op.startswith('PLOP3'): no_dest = True
    srcs, dst = [], []
    if no_dest:
        for o in ops:
            w = 4 if ('.128' in op and not o.startswith('[') and o.startswith('R')) else 1
            for r in regs(o, 1):
                srcs += list(range(r, r + w)) if w > 1 else [r]
    else:
        d = ops[0] if ops else ''
        if re.match(r'R\d', d):
            r0 = int(re.match(r'R(\d+)', d).group(1))
            dst = list(range(r0, r0 + width))
        for o in ops[1:]:
            srcs += regs(o, 1)
        if op.startswith('ATOMG') and len(ops) > 1:  # ATOMG PT, Rd, [addr], Rs
            pass
    # ATOMG format: "PT, R3, desc[..][R56.64], R3"
    if op.startswith('ATOMG'):
        srcs = []; dst = []
        d = ops[1]; r0 = int(d[1:]); dst = [r0]
        for o in ops[2:]: srcs += regs(o, 1)
    for r in srcs:
        if r not in state: state[r] = 'live'
    for r in dst:
        if r not in state and not pred: state[r] = 'dead'
live = sorted(r for r, s in state.items() if s == 'live' and r != 255)
print(len(live), ' '.join('R%d' % r for r in live))
