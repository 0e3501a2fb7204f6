#!/usr/bin/env python3
"""Basic blocks of one kernel's SASS (nvdisasm -c output, or a cubin + kernel-name substring).

    python3 cfg.py CUBIN NAME_SUBSTRING [NVDISASM]      -> blocks: start, end, size, opcodes

A block starts at a label or after a branch / EXIT / BAR-less terminator; `census.py` assigns
per-warp trip counts to blocks by address and classifies their instructions.
"""
import collections
import re
import subprocess
import sys

NVDISASM = "/tmp/cuvenv/lib/python3.11/site-packages/nvidia/cu13/bin/nvdisasm"


def kernel_sass(cubin, sub, nvdisasm=NVDISASM):
    out = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True,
                         check=True).stdout
    cur, funcs = None, {}
    for line in out.split("\n"):
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
            continue
        if cur is None:
            continue
        s = line.strip()
        if re.match(r"^\.L_x_\d+:", s):
            funcs[cur].append(("label", s[:-1]))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?);", line)
        if m:
            funcs[cur].append((int(m.group(1), 16), m.group(2).strip()))
    names = [k for k in funcs if sub in k]
    if len(names) != 1:
        sys.exit("kernel %r matches %d functions" % (sub, len(names)))
    return funcs[names[0]]


def opcode(ins):
    t = ins.split()
    if t[0].startswith("@"):
        t = t[1:]
    return t[0]


def blocks(code):
    """[(start_addr, [(addr, ins)...], labels)]"""
    bl, cur, labels = [], [], []
    for item in code:
        if item[0] == "label":
            if cur:
                bl.append((cur[0][0], cur, labels))
                cur, labels = [], []
            labels.append(item[1])
            continue
        cur.append(item)
        op = opcode(item[1])
        if op.startswith("BRA") or op in ("EXIT", "RET", "CALL", "BRX", "JMP"):
            bl.append((cur[0][0], cur, labels))
            cur, labels = [], []
    if cur:
        bl.append((cur[0][0], cur, labels))
    return bl


if __name__ == "__main__":
    code = kernel_sass(sys.argv[1], sys.argv[2], *(sys.argv[3:4]))
    for start, ins, labels in blocks(code):
        ops = collections.Counter(opcode(i).split(".")[0] for _, i in ins)
        print("%05x-%05x %4d %s | %s | %s" % (start, ins[-1][0], len(ins), ",".join(labels),
              ins[-1][1] if opcode(ins[-1][1]).startswith(("BRA", "EXIT")) else "",
              " ".join("%s:%d" % kv for kv in ops.most_common(8))))
