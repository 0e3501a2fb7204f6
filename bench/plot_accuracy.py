#!/usr/bin/env python3
"""Plots bench/results/accuracy.json (from accuracy_study) as error vs step, one line per scheme.

    python3 bench/plot_accuracy.py bench/results/accuracy.json [--out bench/results/accuracy.png]

Also writes accuracy_summary.md beside the PNG (max error and max KL per scheme and run).
"""
import argparse
import json
import os


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    with open(args.json) as f:
        d = json.load(f)
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.json)), "accuracy.png")
    runs = d["runs"]

    lines = ["# Accuracy of the precision schemes (CPU emulation of storage rounding)\n",
             f"{d['steps']} steps, commit interval K = {d['commit_interval']}, KL over a random "
             f"{d['vocab']}-token projection every {d['kl_every']} steps. Model: {d['model']}.\n"]
    for run, schemes in runs.items():
        lines.append(f"\n## {run}\n")
        lines.append("| scheme | max rel. error | last rel. error | max KL |")
        lines.append("|---|---|---|---|")
        for name, c in sorted(schemes.items(), key=lambda kv: kv[1]["err_max"]):
            kl = max(c["kl"]) if c["kl"] else float("nan")
            lines.append(f"| {name} | {c['err_max']:.2e} | {c['err_last']:.2e} | {kl:.2e} |")
    with open(os.path.join(os.path.dirname(out), "accuracy_summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: wrote the summary, skipped the plot")
        return
    colors = {"fp32": "k", "bf16": "tab:blue", "fp16": "tab:green", "fp8e4m3": "tab:red",
              "int8": "tab:purple"}
    styles = {"eager": "-", "single": "--", "pair": ":"}
    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
    for ax, (run, schemes) in zip(axes.flat, runs.items()):
        for name, c in sorted(schemes.items()):
            kind = name.split("_")[0]
            fmt = name.split("_")[-1]
            xs = [i * d["err_every"] for i in range(len(c["err"]))]
            ax.plot(xs, c["err"], styles[kind], color=colors[fmt], lw=1.1, label=name)
        ax.set_yscale("log")
        ax.set_title(run, fontsize=10)
        ax.grid(alpha=0.3)
        ax.set_ylabel("output rel. error vs float64")
    for ax in axes[1]:
        ax.set_xlabel("decode step")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=7, fontsize=7)
    fig.suptitle("Checkpoint precision schemes: eager (solid), single low-precision checkpoint "
                 "(dashed), fp32 master + low-precision copy (dotted)", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 0.97))
    fig.savefig(out, dpi=110)
    print("wrote", out)


if __name__ == "__main__":
    main()
