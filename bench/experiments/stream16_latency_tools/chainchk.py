import re, sys, subprocess
# for each mamba2 stream kernel in a SASS dump: first barrier, first wait on the state's loads, last copy/load issue before it
sass = sys.argv[1]
cur = None; ks = {}
lines = open(sass).read().split('\n')
i = 0
while i < len(lines):
    l = lines[i]
    if 'Function :' in l:
        cur = l.split('Function :')[1].strip(); ks[cur] = []; i += 1; continue
    m = re.match(r'\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]+) \*/', l)
    if cur and m:
        hi = int(re.search(r'/\* (0x[0-9a-f]+) \*/', lines[i+1]).group(1), 16); c = hi >> 41
        ks[cur].append((m.group(2), (c >> 5) & 7, (c >> 11) & 0x3f)); i += 2; continue
    i += 1
for k, ins in sorted(ks.items()):
    if 'mamba2_stream_agent' not in k: continue
    d = subprocess.run(['c++filt', k], capture_output=True, text=True).stdout
    d = re.sub(r'.*rules::mamba2<(\d+), (\d+), (\S+)>, (\d+), (\d+), replayssm::precision::([^,]*(?:<[^>]*>)?), \d+, (\d+), 0>, (\w+)>.*', r'H\1 \3 K\5 \6 NT\7 B=\8', d.strip())
    end = next(j for j, s in enumerate(ins) if re.match(r'EXIT\s*$', s[0].strip()))
    sb = None; first_wait = None
    for j, (s, wr, wt) in enumerate(ins[:end]):
        if 'LDG.E.EF' in s and sb is None: sb = wr
        if sb is not None and first_wait is None and 'LDG.E.EF' not in s and (wt >> sb) & 1: first_wait = j + 1
    bar = next((j + 1 for j, s in enumerate(ins[:end]) if 'BAR.SYNC' in s[0]), 0)
    acq = next((j + 1 for j, s in enumerate(ins[:end]) if 'ACQBULK' in s[0]), 0)
    late = [j + 1 for j, s in enumerate(ins[:end]) if ('LDGSTS' in s[0] or re.match(r'(@!?P\d )?LDG', s[0])) and first_wait and j + 1 > first_wait]
    print('%-48s path %4d  ACQBULK %4d  BAR %4d  first state wait %4d  loads after it: %d' % (d, end + 1, acq, bar, first_wait or 0, len(late)))
