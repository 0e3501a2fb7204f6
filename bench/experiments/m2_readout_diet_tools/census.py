#!/usr/bin/env python3
"""Dynamic instruction census of one kernel's SASS for one scenario.

    python3 census.py CUBIN NAME_SUBSTRING SPEC [--list]

SPEC (a text file): lines `region NAME START END` (hex addresses, END exclusive) naming the
source phases, and lines `ADDR COUNT` giving a basic block's executions summed over the block's
4 warps (the block starting at ADDR, as cfg.py lists them); blocks not listed run 0 times.
`default COUNT` sets the count of every block not listed (then list the skipped ones as 0).
Prints warp instructions per (row, head) block by region and instruction class.
"""
import collections
import sys

from cfg import blocks, kernel_sass, opcode

CLASSES = [
    ("state LDG.128", lambda o, i: o.startswith("LDG") and ".EF." in o),
    ("other LDG/LDGSTS", lambda o, i: o.startswith(("LDG", "LDGSTS"))),
    ("LDS", lambda o, i: o.startswith("LDS")),
    ("STS", lambda o, i: o.startswith("STS")),
    ("FFMA (fp32 fma)", lambda o, i: o.split(".")[0] == "FFMA"),
    ("other float (FMUL/FADD/MUFU/...)",
     lambda o, i: o.split(".")[0] in ("FMUL", "FADD", "MUFU", "FSEL", "FSETP", "FCHK", "F2FP",
                                      "I2FP", "FMNMX", "F2I", "I2F") or
     (o.startswith("HFMA2") and "RZ, RZ" not in i)),
    ("SHFL", lambda o, i: o.startswith("SHFL")),
    ("sync (BAR/DEPBAR/WARPSYNC/BSSY/BSYNC)",
     lambda o, i: o.split(".")[0] in ("BAR", "DEPBAR", "LDGDEPBAR", "WARPSYNC", "BSSY", "BSYNC",
                                      "ACQBULK", "ENDCOLLECTIVE")),
    ("branch/exit", lambda o, i: o.split(".")[0] in ("BRA", "EXIT", "CALL", "RET")),
    ("STG/ATOMG", lambda o, i: o.startswith(("STG", "ATOMG", "RED"))),
    ("predicates (ISETP/PLOP3/P2R/...)",
     lambda o, i: o.split(".")[0] in ("ISETP", "PLOP3", "P2R", "R2P", "UISETP", "FSETP")),
    ("integer/address/moves (IMAD/IADD3/LEA/SHF/LOP3/MOV/LDC/PRMT/...)", lambda o, i: True),
]


def classify(ins):
    o = opcode(ins)
    for name, f in CLASSES:
        if f(o, ins):
            return name


def main():
    code = kernel_sass(sys.argv[1], sys.argv[2])
    regions, counts, default = [], {}, None
    for line in open(sys.argv[3]):
        t = line.split("#")[0].split()
        if not t:
            continue
        if t[0] == "region":
            regions.append((t[1], int(t[2], 16), int(t[3], 16)))
        elif t[0] == "default":
            default = int(t[1])
        else:
            counts[int(t[0], 16)] = int(t[1])
    bl = blocks(code)
    starts = {s for s, _, _ in bl}
    for a in counts:
        if a not in starts:
            sys.exit("no block starts at %x" % a)
    table = collections.defaultdict(collections.Counter)
    static = collections.Counter()
    for s, ins, _ in bl:
        c = counts.get(s, default or 0)
        for a, i in ins:
            reg = next((r for r, lo, hi in regions if lo <= a < hi), "?")
            static[reg] += 1
            if c:
                table[reg][classify(i)] += c
    total = sum(sum(v.values()) for v in table.values())
    names = [n for n, _ in CLASSES]
    print("warp instructions per (row, head) block (4 warps): %d" % total)
    for r, _, _ in regions + [("?", 0, 0)]:
        if r not in table:
            continue
        v = table[r]
        print("\n%-28s %6d  (static %d)" % (r, sum(v.values()), static[r]))
        for n in names:
            if v[n]:
                print("    %-66s %6d" % (n, v[n]))
    print("\nby class:")
    byc = collections.Counter()
    for v in table.values():
        byc.update(v)
    for n in names:
        print("    %-66s %6d" % (n, byc[n]))


if __name__ == "__main__":
    main()
