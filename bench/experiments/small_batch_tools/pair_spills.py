# pair_spills.py PTXAS_LOG: for every Ahead kernel (mamba2_agent / gdn_agent <..., Ahead = true>),
# its registers and spills beside the plain fused kernel of the same policy (Ahead = false).
import re, sys
stats, cur = {}, None
for l in open(sys.argv[1]):
    m = re.search(r"Compiling entry function '(\S+)'", l)
    if m: cur = m.group(1); sp = (0, 0); continue
    m = re.search(r'(\d+) bytes spill stores, (\d+) bytes spill loads', l)
    if m and cur: sp = tuple(map(int, m.groups()))
    m = re.search(r'Used (\d+) registers', l)
    if m and cur: stats[cur] = (int(m.group(1)),) + sp; cur = None
for k, v in sorted(stats.items()):
    m = re.match(r'(.*ELi\d+ELb[01]ELb0)ELb1(EE.*)', k)
    if not m: continue
    base = m.group(1) + 'ELb0' + m.group(2)
    pol = re.search(r'replay_policyI(.*?)EELNS0_2opE', k)
    b = stats.get(base)
    worse = b is not None and (v[1] > b[1] or v[2] > b[2])
    print('%s ahead %3d regs %3d/%-3d  fused %s  %s' % ('MORE' if worse else '    ', v[0], v[1], v[2],
          '%3d regs %3d/%-3d' % b if b else 'n/a', (pol.group(1) if pol else k)[:150]))
