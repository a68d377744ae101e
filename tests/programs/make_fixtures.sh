#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Writes the hostile input files of bad_inputs.txt into DIR: generated here rather
# than kept in the repository because some are large (deep nesting) or special
# (a directory, a device, a gzip bomb).
set -eu
d=$1
deep() { head -c "$1" /dev/zero | tr '\0' "$2"; }
{ deep 100000 '['; deep 100000 ']'; } >"$d/deep.json"
{ printf '{"name": '; deep 100000 '['; deep 100000 ']'; printf '}'; } >"$d/deep_field.json"
{ printf '{"name": ['; seq -s, 1 200000; printf ']}'; } >"$d/wide_field.json"
echo '{"preset": "olmoe-1b-7b", "layers": 1e999}' >"$d/overflow_number.json"
echo '{"preset": "olmoe-1b-7b", "layers": 99999999999999999999999}' >"$d/overflow_integer.json"
echo '{"preset": "olmoe-1b-7b", "layers": 2000000000}' >"$d/huge_layers.json"
# Unsigned in the document: 2^64 - 1 must not be read (or named) as -1, 2^63 not as -2^63.
echo '{"preset": "olmoe-1b-7b", "layers": 18446744073709551615}' >"$d/unsigned_layers.json"
echo '{"preset": "olmoe-1b-7b", "layers": 9223372036854775808}' >"$d/sign_bit_layers.json"
echo '{"preset": "olmoe-1b-7b", "layers": 200000, "first_dense_layers": 0}' >"$d/many_layers.json"
echo '{"preset": "olmoe-1b-7b", "hidden": 2000000000, "vocab": 2000000000}' >"$d/huge_hidden.json"
echo '{"preset": "olmoe-1b-7b", "expert_ffn": 2000000000, "experts": 60000, "top_k": 8}' >"$d/huge_experts.json"
echo '{"preset": "olmoe-1b-7b", "seq_len": 2000000000}' >"$d/huge_seq.json"
echo '{"preset": "olmoe-1b-7b", "experts": 65536, "top_k": 65536}' >"$d/many_topk.json"
echo '{"preset": "deepseek-moe-16b", "seq_len": 1}' >"$d/one_token.json"
echo '{"preset": "olmoe-1b-7b", "heads": 2000000000, "kv_heads": 2000000000}' >"$d/huge_heads.json"
echo '{"preset": "h100", "nodes": 2000000000, "nics_per_node": 2000000000}' >"$d/huge_nics.json"
echo '{"preset": "h100", "nodes": 100000}' >"$d/many_nodes.json"
echo '{"preset": "h100", "gpus_per_node": 2000000000}' >"$d/huge_gpus.json"
echo '{"preset": "h100", "gpu": {"peak_flops_bf16": 1e308, "peak_flops_fp32": 1e308}}' >"$d/huge_flops.json"
echo '{"preset": "h100", "nic_bandwidth": 1e-300, "nodes": 2}' >"$d/tiny_nic.json"
echo '{"preset": "h100", "gpu": {"hbm_bytes": 1e-300}}' >"$d/tiny_hbm.json"
echo '{"preset": "h100", "intra_node_latency": 1e300}' >"$d/huge_latency.json"
echo '{"preset": "olmoe-1b-7b", "name": "x", "layers": 16, "bogus": 1}' >"$d/unknown_key.json"
printf '{"preset": "olmoe-1b-7b", "name": "\xff\xfe"}' >"$d/bad_utf8.json"
printf '\xef\xbb\xbf{"preset": "olmoe-1b-7b", "layers": "16"}' >"$d/string_layers.json"
mkdir -p "$d/dir.json" "$d/dir.mps" "$d/dir.npy"
ln -sf /dev/zero "$d/zero.json"
ln -sf /dev/zero "$d/zero.mps"
ln -sf /dev/zero "$d/zero.npy"
: >"$d/empty.json"
# A plan whose integers do not fit 32 bits (2^32 + 16 must not become 16).
echo '{"allocation": {"groups": 4294967312, "attention_gpus_per_node": 4, "ffn_gpus_per_node": 4, "attention_nics_per_node": 4, "ffn_nics_per_node": 4}}' >"$d/plan_narrow.json"
echo '{"groups": 1, "attention_gpus_per_node": 4, "ffn_gpus_per_node": 4, "attention_nics_per_node": 0, "ffn_nics_per_node": 0, "colour": "red"}' >"$d/plan_unknown.json"
echo '{"model": "qwen3-235b-a22b", "cluster": "h100", "allocation": {"groups": 1, "attention_gpus_per_node": 4, "ffn_gpus_per_node": 4, "attention_nics_per_node": 0, "ffn_nics_per_node": 0}}' >"$d/plan_other_model.json"
echo '{"model": "olmoe-1b-7b", "cluster": "mi300x", "allocation": {"groups": 1, "attention_gpus_per_node": 4, "ffn_gpus_per_node": 4, "attention_nics_per_node": 0, "ffn_nics_per_node": 0}}' >"$d/plan_other_cluster.json"
echo '{"model": "olmoe-1b-7b", "cluster": "h100", "global_batch": -4, "allocation": {"groups": 1, "attention_gpus_per_node": 4, "ffn_gpus_per_node": 4, "attention_nics_per_node": 0, "ffn_nics_per_node": 0}}' >"$d/plan_bad_batch.json"
echo '{"model": "olmoe-1b-7b", "cluster": "h100", "global_batch": 0, "allocation": {"groups": 1, "attention_gpus_per_node": 4, "ffn_gpus_per_node": 4, "attention_nics_per_node": 0, "ffn_nics_per_node": 0}}' >"$d/plan_zero_batch.json"
echo '{"model": "olmoe-1b-7b", "cluster": "h100", "micro_batch": 0, "allocation": {"groups": 1, "attention_gpus_per_node": 4, "ffn_gpus_per_node": 4, "attention_nics_per_node": 0, "ffn_nics_per_node": 0}}' >"$d/plan_zero_micro.json"
echo '{"preset": "h100", "kernel_comm_sm_fraction": 1}' >"$d/cluster_all_sms.json"
echo '{"model": "olmoe-1b-7b", "cluster": "h100", "optimizer_bytes": -2, "allocation": {"groups": 1, "attention_gpus_per_node": 4, "ffn_gpus_per_node": 4, "attention_nics_per_node": 0, "ffn_nics_per_node": 0}}' >"$d/plan_bad_optimizer.json"
echo '{"model": "olmoe-1b-7b", "cluster": "h100", "optimizer_bytes": "bf16", "allocation": {"groups": 1, "attention_gpus_per_node": 4, "ffn_gpus_per_node": 4, "attention_nics_per_node": 0, "ffn_nics_per_node": 0}}' >"$d/plan_text_optimizer.json"
echo '{"model": "olmoe-1b-7b", "cluster": "h100", "embedding_head": 1, "allocation": {"groups": 1, "attention_gpus_per_node": 4, "ffn_gpus_per_node": 4, "attention_nics_per_node": 0, "ffn_nics_per_node": 0}}' >"$d/plan_number_head.json"
# A plan saved with its model's spec (disagmoe-plan --json), run on a model of the same
# name whose layers are all dense: refused field by field, not by name.
echo '{"model": "olmoe-1b-7b", "cluster": "h100", "model_spec": {"attention_bias":false,"dense_ffn":0,"dtype":"bf16","expert_ffn":1024,"experts":64,"first_dense_layers":0,"head_dim":128,"heads":16,"hidden":2048,"kv_heads":16,"layers":16,"micro_batch":1,"moe_layer_interval":1,"name":"olmoe-1b-7b","qk_norm":true,"seq_len":4096,"shared_expert_ffn":0,"shared_experts":0,"sliding_window":0,"sliding_window_interval":1,"tied_embeddings":false,"top_k":8,"vocab":50304}, "allocation": {"groups": 1, "attention_gpus_per_node": 4, "ffn_gpus_per_node": 4, "attention_nics_per_node": 0, "ffn_nics_per_node": 0}}' >"$d/plan_with_spec.json"
echo '{"preset": "olmoe-1b-7b", "first_dense_layers": 16, "dense_ffn": 8192}' >"$d/dense_olmoe.json"
echo '{"preset": "olmoe-1b-7b", "layers": 2000000000, "layers": 4}' >"$d/duplicate_key.json"
# A user's value that reads like a library field: never renamed into an option.
echo '{"preset": "h100", "name": "context_parallel"}' >"$d/context_parallel_name.json"
echo '{"groups": 1.5, "attention_gpus_per_node": 4, "ffn_gpus_per_node": 4, "attention_nics_per_node": 0, "ffn_nics_per_node": 0}' >"$d/plan_float.json"
echo '{"groups": -1, "attention_gpus_per_node": 4, "ffn_gpus_per_node": 4, "attention_nics_per_node": 0, "ffn_nics_per_node": 0}' >"$d/plan_negative.json"
# A gzip bomb: 64 KiB that inflates to 256 MiB of one repeated MPS-looking line.
yes 'COLUMNS' | head -c 268435456 | gzip -9 >"$d/bomb.mps.gz"
yes 'abcdefgh' | head -c 268435456 | gzip -9 >"$d/bomb.txt.gz"
printf 'NAME x\nROWS\n N obj\nCOLUMNS\n x obj 1e999\nENDATA\n' >"$d/overflow.mps"
printf 'NAME x\nROWS\n N obj\nCOLUMNS\n x obj 0x10\nENDATA\n' >"$d/hex.mps"
printf "NAME x\nROWS\n N obj\nCOLUMNS\n M 'MARKER' 'INTORG'\n x obj 1\nENDATA\n" >"$d/open_marker.mps"
printf 'NAME x\nROWS\n N obj\n L c\nCOLUMNS\n x c 1\nRANGES\n R c 1\n R c 2\nENDATA\n' >"$d/ranges_twice.mps"
# Control bytes in a token: the error escapes them (\xNN) instead of echoing them.
printf 'NAME x\nROWS\n Q\001\033[2J obj\nCOLUMNS\n x obj 1\nENDATA\n' >"$d/control.mps"
printf '\x93NUMPY\x01\x00\x76\x00{'"'"'descr'"'"': '"'"'<i4'"'"', '"'"'fortran_order'"'"': False, '"'"'shape'"'"': (4294967296, 4294967296, 8), }' >"$d/huge_shape.npy"
printf '%*s\n' $((127 - $(wc -c <"$d/huge_shape.npy"))) '' >>"$d/huge_shape.npy"
printf '\x93NUMPY\x01\x00\x76\x00{'"'"'descr'"'"': '"'"'<i4'"'"', '"'"'fortran_order'"'"': False, '"'"'shape'"'"': (0, 2, 2), }' >"$d/empty_trace.npy"
printf '%*s\n' $((127 - $(wc -c <"$d/empty_trace.npy"))) '' >>"$d/empty_trace.npy"
# A FIFO blocks a reader that opens it: every file input must refuse it first.
mkfifo "$d/fifo" "$d/fifo.npy"
# A model name with an escape sequence and a newline: errors print it as \xNN, one line.
printf '{"preset": "olmoe-1b-7b", "name": "a\\u001b[2Jb\\nc"}' >"$d/name_ctrl.json"
