import re, sys
# usage: ann.py file.sass kernel_substring_exact > out
src, kname = sys.argv[1], sys.argv[2]
lines = open(src).read().split('\n')
on = False; out = []; i = 0
while i < len(lines):
    l = lines[i]
    if 'Function :' in l:
        on = (l.split('Function :')[1].strip() == kname)
        i += 1; continue
    m = re.match(r'\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]+) \*/', l)
    if on and m:
        hi = int(re.search(r'/\* (0x[0-9a-f]+) \*/', lines[i+1]).group(1), 16)
        c = hi >> 41
        stall = c & 0xf; yld = (c >> 4) & 1; wr = (c >> 5) & 7; rd = (c >> 8) & 7; wait = (c >> 11) & 0x3f
        ws = ''.join(str(b) for b in range(6) if wait >> b & 1)
        out.append((m.group(1), m.group(2), stall, wr, rd, ws))
        i += 2; continue
    i += 1
for n, (a, ins, st, wr, rd, ws) in enumerate(out, 1):
    tag = ('W%d' % wr if wr != 7 else '  ') + (' R%d' % rd if rd != 7 else '   ') + (' w[%s]' % ws if ws else '      ')
    print('%4d %s  %-18s s%-2d %s' % (n, a, tag, st, re.sub(r'\s+', ' ', ins)))
