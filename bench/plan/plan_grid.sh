#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Plans every model and length of the bench grid on h800x128 (kernel and RDMA M2N) and
# simulates each plan, printing one tab-separated row per setting: model, seq_len, M2N,
# allocation, simulated step s, simulated tokens/s, the plan's batch at that rate (s),
# sequences the simulated step runs, the plan's global batch, refinement simulations, the
# planner's wall seconds, the plan's analytic step s and its error against the simulated
# batch time. Arguments after WORK_DIR go to disagmoe-plan (e.g. --refine-evaluations 0 for
# the analytic plan alone). Run it for two builds to compare them (bench/RESULTS.md).
set -euo pipefail
if [ $# -lt 1 ] || [ "$1" = "--help" ] || [ "$1" = "-h" ]; then
  echo "usage: $0 BUILD_DIR [WORK_DIR [PLAN_ARGS...]]   (BUILD_DIR holds examples/plan/disagmoe-plan and examples/sim/disagmoe-sim)"
  exit $(( $# < 1 ? 2 : 0 ))
fi
P=$1/examples/plan/disagmoe-plan; S=$1/examples/sim/disagmoe-sim; W=${2:-$(mktemp -d)}
shift $(( $# < 2 ? $# : 2 ))
for tool in "$P" "$S"; do [ -x "$tool" ] || { echo "$0: error: $tool: expected a built program" >&2; exit 2; }; done
mkdir -p "$W"
for r in "" "--rdma-m2n"; do for m in deepseek-moe-16b gpt-oss-120b mixtral-8x7b qwen3-235b-a22b; do
  for s in 4096 8192 16384 32768; do
    f=$W/$m-$s$r
    start=$(date +%s.%N)
    if ! "$P" --model $m --cluster h800x128 --seq-len $s $r --no-recommend --json "$@" > $f.plan.json 2> $f.err; then
      printf '%s\t%s\t%s\tNOPLAN\n' $m $s "${r:-kernel}"; continue
    fi
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    "$S" --model $m --cluster h800x128 --seq-len $s $r --plan $f.plan.json --json > $f.sim.json
    python3 - "$m" "$s" "${r:-kernel}" "$wall" $f.plan.json $f.sim.json <<'PY'
import json, sys
m, s, r, wall, pf, sf = sys.argv[1:]
p, q = json.load(open(pf)), json.load(open(sf))
a = p['allocation']
rc = a['recompute'] if isinstance(a['recompute'], dict) else {'attention': a['recompute'], 'ffn': a['recompute']}
sides = 'A+F' if rc['attention'] and rc['ffn'] else 'A' if rc['attention'] else 'F' if rc['ffn'] else 'off'
lay = "p=%d %d/%d nic %d/%d rc=%s%s" % (a['groups'], a['attention_gpus_per_node'], a['ffn_gpus_per_node'],
                                       a['attention_nics_per_node'], a['ffn_nics_per_node'], sides,
                                       '' if a.get('fuse', True) else ' unfused')
if a.get('mixed_nodes', 0): lay += " mixed=%d" % a['mixed_nodes']
batch = p['global_batch'] * p['seq_len']
at_rate = batch / q['tokens_per_second']
predicted = p['predicted']['step_seconds']
print("\t".join(map(str, [m, s, r, lay, "%.3f" % q['step_seconds'], "%.0f" % q['tokens_per_second'],
                          "%.3f" % at_rate, int(q['tokens_per_step'] / p['seq_len']),
                          p['global_batch'], p.get('refinement', {}).get('evaluations', ''), "%.2f" % float(wall),
                          "%.3f" % predicted, "%+.1f%%" % (100 * (predicted / at_rate - 1))])))
PY
  done
done; done
