#!/usr/bin/env python3
"""Which kernels of two cubins have different SASS, ignoring branch-label numbers and the
numbering of internal slow-path helpers (so a refactor that leaves code unchanged reads as such).

    nvcc ... -cubin bench/bench_spec.cu -o before.cubin    (at the old commit)
    nvcc ... -cubin bench/bench_spec.cu -o after.cubin     (at the new one)
    python3 scripts/sass_same.py before.cubin after.cubin [NVDISASM]

Prints the kernels only in one file, and those present in both whose code differs; exit 0 when
every common kernel is identical.
"""
import re
import subprocess
import sys


def kernels(cubin, nvdisasm):
    out = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True, check=True).stdout
    funcs, name = {}, None
    for line in out.split("\n"):
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            name = m.group(1)
            funcs[name] = []
        elif name and re.match(r"\s*/\*[0-9a-f]{4,}\*/", line):
            funcs[name].append(re.sub(r"/\*[0-9a-f]+\*/", "", line).split(";")[0].strip())
    for name, code in funcs.items():
        labels = {}

        def label(m):
            return "L%d" % labels.setdefault(m.group(0), len(labels))

        code = [re.sub(r"\.L_x_\d+", label, ins) for ins in code]
        funcs[name] = [re.sub(r"__internal_\d+_", "__internal_", ins) for ins in code]
    return funcs


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    nvdisasm = sys.argv[3] if len(sys.argv) > 3 else "nvdisasm"
    a, b = kernels(sys.argv[1], nvdisasm), kernels(sys.argv[2], nvdisasm)
    for k in sorted(set(a) ^ set(b)):
        print("only in", "first:" if k in a else "second:", k)
    differ = [k for k in a if k in b and a[k] != b[k]]
    for k in differ:
        print("differs:", k)
    print("%d common kernels, %d differ" % (len([k for k in a if k in b]), len(differ)))
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
