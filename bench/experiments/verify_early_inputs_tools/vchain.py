import re, sys
# vchain.py ANN : in an ann.py listing of one kernel: the first state load (LDG.E.EF), the first
# instruction that waits on its scoreboard, and every global load / async copy / atomic /
# ACQBULK (pdl_wait) / barrier, marked before (<) or after (>) that first wait.
L = []
for l in open(sys.argv[1]):
    m = re.match(r'\s*(\d+) (\w+)  (.{18}) s(\d+)\s+(.*)', l.rstrip('\n'))
    if m: L.append((int(m.group(1)), m.group(2), m.group(3), m.group(5)))
n0, sb = next((n, int(re.search(r'W(\d)', t).group(1))) for n, a, t, i in L if 'LDG.E.EF' in i)
first = next(n for n, a, t, i in L if n > n0 and 'LDG.E.EF' not in i and re.search(r'w\[\d*%d' % sb, t))
print('first state load line %d on SB%d, first wait on it: line %d' % (n0, sb, first))
for n, a, t, i in L:
    if re.search(r'LDG|LDGSTS|ATOMG|ACQBULK|BAR\.SYNC|LDGDEPBAR|DEPBAR|EXIT', i):
        print('%s %4d %s %s %s' % ('>' if n > first else '<', n, a, t.strip(), i))
