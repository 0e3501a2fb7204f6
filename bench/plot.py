#!/usr/bin/env python3
"""Turns a bench_decode JSON (Google Benchmark) into the results the README shows.

    python3 bench/plot.py bench/results/decode.json [--out-dir bench/results]

Writes <out-dir>/decode_summary.md (per-shape tables: time per step, ratio to our eager step,
fraction of the measured copy / read bandwidth) and <out-dir>/commit_interval_sweep.png
(per-step time vs commit interval K at batch 256, with the eager line).
"""
import argparse
import json
import sys
import os
import re
from collections import defaultdict


def read_json(path):
    """A benchmark JSON; one cut short (a run stopped by a time limit) is closed after its last
    complete entry, with a warning, so that what was measured is not lost."""
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        end = text.rfind("\n    },")
        if end < 0:
            raise
        data = json.loads(text[:end] + "\n    }\n  ]\n}\n")
        print(f"warning: {path} was cut short; using its first {len(data['benchmarks'])} entries",
              file=sys.stderr)
        return data


def load(path):
    data = read_json(path)
    rows = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = re.sub(r"/manual_time.*$", "", b["run_name"] if "run_name" in b else b["name"])
        rows[name] = b
    return data.get("context", {}), rows


def save_figure(fig, ax, path):
    """The finish every figure here shares: time axis from 0, grid, legend, PNG."""
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def us(b):
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b.get("time_unit", "us")]
    return b["real_time"] * scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json", nargs="+",
                    help="bench_decode JSON(s); several (parts of one suite run in separate "
                         "calls) are merged, a later file's entry replacing an earlier one's")
    ap.add_argument("--out-dir", default=os.path.dirname(os.path.abspath(__file__)) + "/results")
    ap.add_argument("--spec", default=None,
                    help="bench_spec JSON: adds the speculative-round table and spec_rounds.png")
    ap.add_argument("--summary", default="decode_summary.md", help="name of the summary file")
    args = ap.parse_args()
    ctx, rows = load(args.json[0])
    for extra in args.json[1:]:
        rows.update(load(extra)[1])
    os.makedirs(args.out_dir, exist_ok=True)

    copy = max((b["bytes_per_second"] for n, b in rows.items() if n.startswith("copy/") and
                not n.endswith("kind:2")), default=float("nan"))
    read = next((b["bytes_per_second"] for n, b in rows.items() if n.endswith("kind:2")), float("nan"))

    # decode tables: name = <rule>/<shape>/K16/<mode>/<args>
    table = defaultdict(dict)
    for n, b in rows.items():
        m = re.match(r"^(mamba2|gdn|mamba2_pipe|gdn_pipe)/([^/]+)/K(\d+)/([a-z_]+)/.*batch:(\d+)", n)
        if m:
            table[(m.group(1), m.group(2))][(m.group(4), int(m.group(5)))] = b
    lines = [f"# Decode benchmark summary\n",
             f"Device: {ctx.get('device', '?')}, date {ctx.get('date', '?')}, "
             f"commit {ctx.get('replayssm_commit', '?')}. "
             f"Copy ceiling measured in the same run: {copy / 1e12:.2f} TB/s (read + write); "
             f"read-only: {read / 1e12:.2f} TB/s. Times are medians per decode step; "
             f"'x eager' is our eager step's time over this kernel's; '% copy' is the kernel's "
             f"counted bytes/s over the copy ceiling.\n"]
    for (rule, shape), cases in sorted(table.items()):
        lines.append(f"\n## {rule} {shape}, fp32 state, bf16 inputs, K = 16\n")
        lines.append("| batch | eager us | eager % copy | replay step us | replay % copy | commit step us "
                     "| window avg us | window x eager |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for batch in sorted({k[1] for k in cases}):
            e, r, c, w = (cases.get((mname, batch)) for mname in
                          ("eager", "replay_step", "commit_step", "replay_window_avg"))
            if not (e and r and c and w):
                continue
            lines.append(f"| {batch} | {us(e):.1f} | {100 * e['bytes_per_second'] / copy:.0f}% | "
                         f"{us(r):.1f} | {100 * r['bytes_per_second'] / copy:.0f}% | {us(c):.1f} | "
                         f"{us(w):.1f} | {us(e) / us(w):.2f}x |")

    sweep = defaultdict(dict)
    for n, b in rows.items():
        m = re.match(r"^sweep(_pipe)?/(mamba2|gdn)/K(\d+)", n)
        if m:
            sweep[m.group(2) + (m.group(1) or "")][int(m.group(3))] = b
    if sweep:
        lines.append("\n## Commit-interval sweep, batch 256 (staggered window average)\n")
        lines.append("| rule | K | us per step | MB per step | x eager |")
        lines.append("|---|---|---|---|---|")
    eager_line = {}
    for rule, ks in sorted(sweep.items()):
        shape = "H128_G8" if rule.startswith("mamba2") else "Hv64_Hk16"
        e = table.get((rule.replace("_pipe", ""), shape), {}).get(("eager", 256))
        eager_line[rule] = us(e) if e else None
        for k, b in sorted(ks.items()):
            ratio = f"{eager_line[rule] / us(b):.2f}x" if eager_line[rule] else "?"
            lines.append(f"| {rule} | {k} | {us(b):.1f} | {b['bytes_per_step'] / 1e6:.0f} | {ratio} |")
    # small batches without a workspace: small/<rule>/<variant>/<mode>/.../batch:<b>, against the
    # eager step of the suite's shape (Mamba-2 H128_G8, GDN Hv64_Hk16) at the same batch
    small = defaultdict(dict)
    for n, b in rows.items():
        m = re.match(r"^small/(mamba2|gdn)/([^/]+)/([a-z_]+)/.*batch:(\d+)", n)
        if m:
            small[(m.group(1), m.group(2), int(m.group(4)))][m.group(3)] = b
    if small:
        lines.append("\n## Small batches, fused kernel (no workspace), tile variants, K = 16\n")
        lines.append("| rule | variant | batch | eager us | replay step us | window avg us | "
                     "window x eager |")
        lines.append("|---|---|---|---|---|---|---|")
    for (rule, variant, batch), cases in sorted(small.items()):
        shape = "H128_G8" if rule == "mamba2" else "Hv64_Hk16"
        e = table.get((rule, shape), {}).get(("eager", batch))
        r, w = cases.get("replay_step"), cases.get("replay_window_avg")
        cell = lambda x: f"{us(x):.1f}" if x else "-"
        ratio = f"{us(e) / us(w):.2f}x" if (e and w) else "?"
        lines.append(f"| {rule} | {variant} | {batch} | {cell(e)} | {cell(r)} | {cell(w)} | {ratio} |")
    # precision schemes: precision/<rule>/<shape>/<scheme>/<mode>/... at batch 256, K = 16
    prec = defaultdict(dict)
    for n, b in rows.items():
        m = re.match(r"^precision/(mamba2|gdn)/([^/]+)/([a-z0-9_]+)/([a-z_]+)/", n)
        if m:
            prec[(m.group(1), m.group(2))][(m.group(3), m.group(4))] = b
    if prec:
        lines.append("\n## Precision schemes, batch 256, K = 16 (window average per step)\n")
        lines.append("The fp32 rows are the suite's in the same run. 'x eager fp32' and 'x eager "
                     "bf16' are those eager steps' times over the scheme's window average.\n")
        lines.append("| rule | shape | scheme | eager us | window avg us | % copy | x eager fp32 "
                     "| x eager bf16 |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for (rule, shape), cases in sorted(prec.items()):
            e32 = table.get((rule, shape), {}).get(("eager", 256))
            e16 = cases.get(("bf16", "eager"))
            for scheme in ("bf16", "fp16", "fp8", "int8", "fp32_bf16", "fp32_fp16", "fp32_fp8",
                           "fp32_int8"):
                w = cases.get((scheme, "replay_window_avg"))
                if not w:
                    continue
                e = cases.get((scheme, "eager"))
                lines.append(
                    f"| {rule} | {shape} | {scheme} | {f'{us(e):.1f}' if e else '-'} | {us(w):.1f} | "
                    f"{100 * w['bytes_per_second'] / copy:.0f}% | "
                    f"{f'{us(e32) / us(w):.2f}x' if e32 else '?'} | "
                    f"{f'{us(e16) / us(w):.2f}x' if e16 else '?'} |")

    rounds = defaultdict(dict)
    if args.spec and os.path.exists(args.spec):
        spec_ctx, spec_rows = load(args.spec)
        for n, b in spec_rows.items():
            m = re.match(r"^spec/(\w+)/([^/]+)/T(\d+)/(replay|eager)_round", n)
            if m:
                rounds[(m.group(1), m.group(2), int(m.group(3)))][m.group(4)] = b
        # "<shape>_ws" rows (verify_step with a workspace: the split verification),
        # "<shape>_ws_K<k>" rows (the same at another commit interval), "<shape>_bf16copy" rows
        # (a bf16 serving copy beside the fp32 checkpoint) and "<shape>_bf16copy_ws[_K<k>]" have
        # no eager round of their own: the eager round of <shape> is theirs (it writes an fp32
        # state per token: no K, no copy).
        for (rule, shape, t), r in rounds.items():
            m = re.match(r"^(.*?)((?:_bf16copy)?(?:_ws(?:_K\d+)?)?)$", shape)
            base = rounds.get((rule, m.group(1), t), {}) if m.group(2) else {}
            if "eager" not in r and "eager" in base:
                r["eager"] = base["eager"]
        lines.append("\n## Speculative rounds, batch 256, K = 16 unless the shape says _K<k> "
                     "(per round, random acceptance)\n")
        lines.append(f"bench_spec: date {spec_ctx.get('date', '?')}, "
                     f"commit {spec_ctx.get('replayssm_commit', '?')}; '% copy' against the "
                     "decode run's copy ceiling above.\n")
        lines.append("| rule | shape | T | eager round us | replay round us | x eager | replay % copy |")
        lines.append("|---|---|---|---|---|---|---|")
        for (rule, shape, t), r in sorted(rounds.items()):
            if "eager" in r and "replay" in r:
                e, p = r["eager"], r["replay"]
                lines.append(f"| {rule} | {shape} | {t} | {us(e):.1f} | {us(p):.1f} | "
                             f"{us(e) / us(p):.2f}x | {100 * p['bytes_per_second'] / copy:.0f}% |")
    with open(os.path.join(args.out_dir, args.summary), "w") as f:
        f.write("\n".join(lines) + "\n")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: wrote the summary, skipped the plot")
        return
    if rounds:  # per rule: speedup over the eager round vs tokens per round, K = 16 rows
        rules = sorted({r for r, _, _ in rounds})
        fig, axes = plt.subplots(1, len(rules), figsize=(6 * len(rules), 4.2), squeeze=False)
        for ax, rule in zip(axes[0], rules):
            for shape in sorted({sh for r, sh, _ in rounds if r == rule and "_K" not in sh}):
                ts = sorted(t for r, sh, t in rounds
                            if (r, sh) == (rule, shape) and len(rounds[(r, sh, t)]) == 2)
                ax.plot(ts, [us(rounds[(rule, shape, t)]["eager"]) /
                             us(rounds[(rule, shape, t)]["replay"]) for t in ts],
                        marker="o", label=shape)
            ax.axhline(4.5, ls="--", color="gray", label="issue 4 target at T = 4")
            ax.set_xlabel("tokens per row per round T (last accepted + drafts)")
            ax.set_ylabel("eager round / replay round, batch 256")
            ax.set_title(f"{rule} speculative rounds, K = 16 ({spec_ctx.get('device', '?')})")
            save_figure(fig, ax, os.path.join(args.out_dir, "spec_rounds.png"))
    if not sweep:
        print("wrote", args.out_dir, "(no commit-interval sweep in this JSON: no sweep plot)")
        return
    fig, ax = plt.subplots(figsize=(7, 4.2))
    labels = {"mamba2": "Mamba-2 H128 P64 N128 G8", "gdn": "Gated DeltaNet Hv64 Hk16 K=V=128",
              "mamba2_pipe": "Mamba-2, pipelined", "gdn_pipe": "Gated DeltaNet, pipelined"}
    for rule, ks in sorted(sweep.items()):
        xs = sorted(ks)
        line, = ax.plot(xs, [us(ks[k]) for k in xs], marker="o", label=f"replay, {labels[rule]}")
        if eager_line.get(rule) and not rule.endswith("_pipe"):
            ax.axhline(eager_line[rule], ls="--", color=line.get_color(), label=f"eager, {labels[rule]}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("commit interval K (steps)")
    ax.set_ylabel("time per decode step (us), batch 256")
    ax.set_title(f"ReplaySSM per-step time vs K ({ctx.get('device', '?')})")
    save_figure(fig, ax, os.path.join(args.out_dir, "commit_interval_sweep.png"))
    print("wrote", args.out_dir)


if __name__ == "__main__":
    main()
