#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plans each model and sequence length on h800x128 twice, as before session 17 (no
context parallelism, ping-pong group 2p: --context-parallel 1 --group-factor 2) and with
the planner's automatic choices of both, and prints a Markdown table of both plans and
their simulated steps (after refinement: the plan's batch at the simulated rate) with the
gain (bench/RESULTS.md, session 17)."""
import argparse
import json
import os
import subprocess
import sys


def plan(program, model, seq, extra):
    r = subprocess.run([program, "--model", model, "--cluster", "h800x128", "--seq-len", str(seq), "--no-recommend",
                        "--json"] + extra, capture_output=True, text=True)
    if r.returncode != 0:
        return None, "no plan fits" if "memory_bytes" in r.stderr else r.stderr.strip()
    j = json.loads(r.stdout)
    a = j["allocation"]
    refined = j.get("refinement", {})
    step = refined["step_seconds"] if "step_seconds" in refined else j["search"]["seed_step_seconds"]
    layout = (f"p={a['groups']} {a['attention_gpus_per_node']}/{a['ffn_gpus_per_node']} cp={a['context_parallel']} "
              f"g={a['group_factor']}p")
    return (j["global_batch"], layout, step), None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("build_dir", help="a build holding examples/plan/disagmoe-plan (e.g. build/release)")
    args = ap.parse_args()
    program = os.path.join(args.build_dir, "examples", "plan", "disagmoe-plan")
    if not os.access(program, os.X_OK):
        print(f"{sys.argv[0]}: error: {program}: expected a built program", file=sys.stderr)
        return 2
    print("| model | seq | sequences | cp = 1, g = 2p: plan | step s | automatic: plan | step s | gain |")
    print("|---|---|---|---|---|---|---|---|")
    for model in ["deepseek-moe-16b", "mixtral-8x7b", "gpt-oss-120b", "qwen3-235b-a22b"]:
        for seq in [8192, 16384, 32768, 131072]:
            one, e1 = plan(program, model, seq, ["--context-parallel", "1", "--group-factor", "2"])
            auto, e2 = plan(program, model, seq, [])
            if one is None or auto is None:
                cells = [(e, "") if r is None else (r[1], f"{r[2]:.3f}") for r, e in ((one, e1), (auto, e2))]
                batch = (one or auto or [""])[0]
                print(f"| {model} | {seq // 1024}K | {batch} | {cells[0][0]} | {cells[0][1]} | {cells[1][0]} | "
                      f"{cells[1][1]} | |")
                continue
            print(f"| {model} | {seq // 1024}K | {one[0]} | {one[1]} | {one[2]:.3f} | {auto[1]} | {auto[2]:.3f} | "
                  f"{one[2] / auto[2]:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
