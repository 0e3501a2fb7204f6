# regs.py PTXAS_LOG: one line per kernel: registers, spill stores/loads, short name
import re, sys
cur = None
for l in open(sys.argv[1]):
    m = re.search(r"Compiling entry function '(\S+)'", l)
    if m: cur = m.group(1); sp = ''; continue
    m = re.search(r'(\d+) bytes spill stores, (\d+) bytes spill loads', l)
    if m and cur: sp = '%s/%s' % m.groups()
    m = re.search(r'Used (\d+) registers', l)
    if m and cur:
        n = cur
        n = re.sub(r'_ZN9replayssm6detail', '', n)
        k = re.search(r'(mamba2_agent|gdn_agent|mamba2_stream_agent|gdn_stream_agent|mamba2_coef_kernel|gdn_coef_kernel)', n)
        op = re.search(r'opE(\d)ELi(\d+)((?:ELb[01])+)', n)
        tag = (k.group(1) if k else n[:40]) + (' op%s MD%s %s' % (op.group(1), op.group(2), op.group(3).replace('ELb', '')) if op else '')
        print('%-4s regs  spill %-8s %s' % (m.group(1), sp, tag)); cur = None
