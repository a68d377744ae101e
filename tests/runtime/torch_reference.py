#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Independent PyTorch implementation of disagmoe's reference MoE decoder.

Two uses:
  check DIR  test oracle: recompute the C++ code's losses and gradients with torch
             autograd and compare them (exit 0 pass, 1 mismatch, 2 bad input,
             77 skip when PyTorch cannot be imported).
  bench      CPU training-speed peer: train the same architecture with
             torch.optim.AdamW and print one JSON line with tokens/second.

The model (float32 throughout) follows Hugging Face transformers'
MixtralForCausalLM (models/mixtral/modeling_mixtral.py) and its tensor names:
  * RMSNorm as LlamaRMSNorm: y = x * rsqrt(mean(x^2) + eps) * w.
  * RoPE in HF Llama's rotate-half convention: inv_freq_i = theta^(-2i/hd),
    q' = q cos + rotate_half(q) sin with cos/sin concatenated twice (Su et al.,
    "RoFormer", 2021).
  * Grouped-query attention (Ainslie et al., "GQA", 2023), causal, with Mistral's
    sliding window: query i sees keys j with i - w < j <= i (Jiang et al.,
    "Mistral 7B", 2023).
  * Router and experts as MixtralSparseMoeBlock / MixtralBlockSparseTop2MLP
    (Jiang et al., "Mixtral of Experts", 2024): softmax, top-k, gates
    renormalised to sum 1, expert w2(silu(w1 x) * w3 x).
  * Load-balancing loss of Switch Transformers (Fedus et al., 2021, eq. 4-6) in
    Megatron-Core's top-k form (switch_load_balancing_loss_func):
    aux = E sum_i f_i P_i, f_i = count_i / (T k) (constant), P_i = mean_t probs.
  * Router z-loss of ST-MoE (Zoph et al., 2022, eq. 5): mean_t logsumexp^2.
  * Objective = mean next-byte cross-entropy + per layer
    (router_aux_loss_coef * aux + disagmoe_z_loss_coef * z).
Safetensors files (https://github.com/huggingface/safetensors, format spec in
its README) are parsed and written by hand: u64 little-endian header length,
JSON header, raw little-endian data.

Runs with Debian's /usr/bin/python3 and PyTorch >= 1.13; needs nothing else.
"""

import argparse
import gzip
import json
import math
import os
import re
import struct
import sys
import time

SKIP = 77
EXIT_PASS, EXIT_FAIL, EXIT_BAD = 0, 1, 2


class BadInput(Exception):
    """An input file is missing or malformed (exit status 2)."""


def import_torch():
    """Imports torch lazily; exits 77 (ctest skip) when it is not importable."""
    try:
        import torch  # noqa: F401
    except Exception:  # ImportError, or a broken install raising something else
        print("torch check: skipped (PyTorch not importable)")
        sys.exit(SKIP)
    return torch


# ---------------------------------------------------------------- safetensors

def read_safetensors(path):
    """Reads an F32 safetensors file into {name: float32 tensor} (copies)."""
    import torch
    if not os.path.isfile(path):
        raise BadInput("missing file: " + path)
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise BadInput(path + ": shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise BadInput(path + ": header length %d exceeds the file" % n)
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except ValueError as e:
        raise BadInput(path + ": bad JSON header: %s" % e)
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info.get("dtype") != "F32":
            raise BadInput("%s: tensor %s has dtype %s, want F32" % (path, name, info.get("dtype")))
        shape = [int(s) for s in info["shape"]]
        b, e = (int(x) for x in info["data_offsets"])
        count = 1
        for s in shape:
            count *= s
        if e - b != 4 * count or e > len(data) or b < 0:
            raise BadInput("%s: tensor %s has bad data_offsets [%d, %d]" % (path, name, b, e))
        if count == 0:
            t = torch.zeros(shape, dtype=torch.float32)
        else:
            t = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32).reshape(shape)
        out[name] = t
    return out


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} as F32 safetensors (names sorted, 8-byte aligned header)."""
    import torch
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous().cpu()
        raw = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


# ---------------------------------------------------------------- config

class Config:
    """The MixtralConfig fields the model needs (plus disagmoe_z_loss_coef)."""

    def __init__(self, hidden, ffn, layers, heads, kv_heads, experts, top_k, vocab=256,
                 seq_len=64, eps=1e-5, rope_theta=10000.0, window=0, aux_coef=0.0, z_coef=0.0):
        self.hidden, self.ffn, self.layers = hidden, ffn, layers
        self.heads, self.kv_heads = heads, kv_heads
        self.experts, self.top_k, self.vocab, self.seq_len = experts, top_k, vocab, seq_len
        self.eps, self.rope_theta, self.window = eps, rope_theta, window
        self.aux_coef, self.z_coef = aux_coef, z_coef
        self.validate()

    @property
    def head_dim(self):
        return self.hidden // self.heads

    def validate(self):
        def need(ok, what):
            if not ok:
                raise BadInput("config: " + what)
        need(self.hidden > 0 and self.heads > 0 and self.hidden % self.heads == 0,
             "hidden_size must be a positive multiple of num_attention_heads")
        need(self.head_dim % 2 == 0, "head_dim must be even (RoPE)")
        need(self.kv_heads > 0 and self.heads % self.kv_heads == 0,
             "num_attention_heads must be a multiple of num_key_value_heads")
        need(self.layers >= 0 and self.ffn > 0 and self.vocab > 0 and self.seq_len > 0,
             "sizes must be positive")
        need(1 <= self.top_k <= self.experts, "need 1 <= num_experts_per_tok <= num_local_experts")
        need(self.window >= 0, "sliding_window must be null or >= 0")

    def to_json(self):
        return {"model_type": "mixtral", "hidden_size": self.hidden, "intermediate_size": self.ffn,
                "num_hidden_layers": self.layers, "num_attention_heads": self.heads,
                "num_key_value_heads": self.kv_heads, "num_local_experts": self.experts,
                "num_experts_per_tok": self.top_k, "rms_norm_eps": self.eps,
                "rope_theta": self.rope_theta, "vocab_size": self.vocab,
                "max_position_embeddings": self.seq_len,
                "sliding_window": self.window if self.window > 0 else None,
                "router_aux_loss_coef": self.aux_coef, "disagmoe_z_loss_coef": self.z_coef,
                "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float32"}


# disagmoe_* keys the C++ writes for shapes Mixtral cannot express, and the value
# that means "Mixtral's shape"; anything else is unsupported here.
_MIXTRAL_EXTRAS = {"disagmoe_first_dense_layers": 0, "disagmoe_moe_layer_interval": 1,
                   "disagmoe_shared_experts": 0}


def load_config(path):
    """Parses config.json into a Config; raises BadInput for missing keys or odd shapes."""
    if not os.path.isfile(path):
        raise BadInput("missing file: " + path)
    try:
        with open(path) as f:
            j = json.load(f)
        window = j.get("sliding_window") or 0
        cfg = Config(hidden=int(j["hidden_size"]), ffn=int(j["intermediate_size"]),
                     layers=int(j["num_hidden_layers"]), heads=int(j["num_attention_heads"]),
                     kv_heads=int(j["num_key_value_heads"]), experts=int(j["num_local_experts"]),
                     top_k=int(j["num_experts_per_tok"]), vocab=int(j["vocab_size"]),
                     seq_len=int(j["max_position_embeddings"]), eps=float(j["rms_norm_eps"]),
                     rope_theta=float(j["rope_theta"]), window=int(window),
                     aux_coef=float(j.get("router_aux_loss_coef", 0.0)),
                     z_coef=float(j.get("disagmoe_z_loss_coef", 0.0)))
    except (ValueError, KeyError, TypeError) as e:
        raise BadInput("%s: bad or missing key: %s" % (path, e))
    for key, want in _MIXTRAL_EXTRAS.items():
        if key in j and j[key] != want:
            raise BadInput("%s: unsupported non-Mixtral shape (%s = %s)" % (path, key, j[key]))
    if "disagmoe_head_dim" in j and j["disagmoe_head_dim"] != cfg.head_dim:
        raise BadInput("%s: unsupported disagmoe_head_dim %s != hidden/heads" % (path, j["disagmoe_head_dim"]))
    if j.get("tie_word_embeddings", False):
        raise BadInput(path + ": tied embeddings are not supported")
    return cfg


# ---------------------------------------------------------------- parameters

def param_shapes(cfg):
    """{HF name: shape} for every parameter, in a fixed order."""
    d, hd = cfg.hidden, cfg.head_dim
    shapes = {"model.embed_tokens.weight": (cfg.vocab, d)}
    for i in range(cfg.layers):
        p = "model.layers.%d." % i
        shapes[p + "input_layernorm.weight"] = (d,)
        shapes[p + "self_attn.q_proj.weight"] = (cfg.heads * hd, d)
        shapes[p + "self_attn.k_proj.weight"] = (cfg.kv_heads * hd, d)
        shapes[p + "self_attn.v_proj.weight"] = (cfg.kv_heads * hd, d)
        shapes[p + "self_attn.o_proj.weight"] = (d, cfg.heads * hd)
        shapes[p + "post_attention_layernorm.weight"] = (d,)
        shapes[p + "block_sparse_moe.gate.weight"] = (cfg.experts, d)
        for e in range(cfg.experts):
            q = p + "block_sparse_moe.experts.%d." % e
            shapes[q + "w1.weight"] = (cfg.ffn, d)
            shapes[q + "w2.weight"] = (d, cfg.ffn)
            shapes[q + "w3.weight"] = (cfg.ffn, d)
    shapes["model.norm.weight"] = (d,)
    shapes["lm_head.weight"] = (cfg.vocab, d)
    return shapes


def init_params(cfg, seed=0, std=0.02):
    """Random init: matrices normal(0, std), norm gains 1; leaves requiring grad."""
    import torch
    g = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in param_shapes(cfg).items():
        if len(shape) == 1:
            t = torch.ones(shape, dtype=torch.float32)
        else:
            t = torch.randn(shape, generator=g, dtype=torch.float32) * std
        params[name] = t.requires_grad_(True)
    return params


# ---------------------------------------------------------------- model

def rms_norm(x, w, eps):
    """LlamaRMSNorm: x * rsqrt(mean(x^2, -1) + eps) * w."""
    import torch
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_tables(seq_len, head_dim, theta):
    """cos, sin [seq_len, head_dim] for positions 0..seq_len-1 (computed in float64)."""
    import torch
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    inv_freq = theta ** (-2.0 * i / head_dim)
    angle = torch.arange(seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat([angle, angle], dim=-1)
    return emb.cos().to(torch.float32), emb.sin().to(torch.float32)


def rotate_half(x):
    """HF Llama rotate_half: cat(-x2, x1) over the last dim."""
    import torch
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    """x [B, heads, S, hd] -> x cos + rotate_half(x) sin."""
    return x * cos + rotate_half(x) * sin


def attention_mask(seq_len, window):
    """Bool [S, S], True where query i may see key j: j <= i and (w == 0 or j > i - w)."""
    import torch
    i = torch.arange(seq_len)[:, None]
    j = torch.arange(seq_len)[None, :]
    allowed = j <= i
    if window > 0:
        allowed = allowed & (j > i - window)
    return allowed


def attention(x, wq, wk, wv, wo, cfg, cos, sin, mask):
    """GQA causal self-attention with RoPE; x [B, S, d] -> [B, S, d]."""
    import torch
    B, S, _ = x.shape
    H, KV, hd = cfg.heads, cfg.kv_heads, cfg.head_dim
    q = (x @ wq.t()).view(B, S, H, hd).transpose(1, 2)
    k = (x @ wk.t()).view(B, S, KV, hd).transpose(1, 2)
    v = (x @ wv.t()).view(B, S, KV, hd).transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    group = H // KV
    if group > 1:  # query head h uses kv head h // group
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    o = (probs @ v).transpose(1, 2).reshape(B, S, H * hd)
    return o @ wo.t()


def route(x, wg, top_k):
    """Router: (ids [T,k], gates [T,k], probs [T,E], logits [T,E]).

    Top-k by a stable descending sort, so equal probabilities keep the lower expert id
    first, as the C++ router does.
    """
    import torch
    logits = x @ wg.t()
    probs = torch.softmax(logits, dim=-1)
    _, order = torch.sort(probs.detach(), dim=-1, descending=True, stable=True)
    ids = order[:, :top_k]
    chosen = probs.gather(1, ids)
    gates = chosen / chosen.sum(dim=-1, keepdim=True)
    return ids, gates, probs, logits


def router_losses(ids, probs, logits, experts):
    """(aux, z): Switch/Megatron load balancing and ST-MoE z-loss, unscaled."""
    import torch
    T, k = ids.shape
    counts = torch.bincount(ids.reshape(-1), minlength=experts).to(probs.dtype)
    f = (counts / float(T * k)).detach()
    aux = experts * (f * probs.mean(dim=0)).sum()
    z = torch.logsumexp(logits, dim=-1).pow(2).mean()
    return aux, z


def expert_mlp(x, w1, w2, w3):
    """MixtralBlockSparseTop2MLP: w2(silu(w1 x) * w3 x)."""
    import torch
    return (torch.nn.functional.silu(x @ w1.t()) * (x @ w3.t())) @ w2.t()


def moe(x, ids, gates, experts_w):
    """sum_j g_j Expert_{e_j}(x) by per-expert index_select / index_add_; x [T, d]."""
    import torch
    T, k = ids.shape
    flat_ids = ids.reshape(-1)
    flat_gates = gates.reshape(-1)
    sorted_ids, order = torch.sort(flat_ids, stable=True)
    counts = torch.bincount(sorted_ids, minlength=len(experts_w)).tolist()
    out = torch.zeros_like(x)
    start = 0
    for e, n in enumerate(counts):
        if n == 0:
            continue
        slots = order[start:start + n]
        start += n
        tokens = slots // k
        y = expert_mlp(x.index_select(0, tokens), *experts_w[e])
        out.index_add_(0, tokens, y * flat_gates.index_select(0, slots)[:, None])
    return out


def forward(params, cfg, inputs, targets):
    """(lm_loss, aux_total, z_total), each a 0-d tensor; inputs/targets long [B, S].

    aux_total and z_total already carry their coefficients and are summed over layers;
    the objective is their sum with lm_loss.
    """
    import torch
    B, S = inputs.shape
    cos, sin = rope_tables(S, cfg.head_dim, cfg.rope_theta)
    mask = attention_mask(S, cfg.window)
    h = params["model.embed_tokens.weight"].index_select(0, inputs.reshape(-1)).view(B, S, cfg.hidden)
    aux_total = torch.zeros((), dtype=torch.float32)
    z_total = torch.zeros((), dtype=torch.float32)
    for i in range(cfg.layers):
        p = "model.layers.%d." % i
        a = p + "self_attn."
        x = rms_norm(h, params[p + "input_layernorm.weight"], cfg.eps)
        r = h + attention(x, params[a + "q_proj.weight"], params[a + "k_proj.weight"],
                          params[a + "v_proj.weight"], params[a + "o_proj.weight"], cfg, cos, sin, mask)
        x = rms_norm(r, params[p + "post_attention_layernorm.weight"], cfg.eps).reshape(B * S, cfg.hidden)
        ids, gates, probs, logits = route(x, params[p + "block_sparse_moe.gate.weight"], cfg.top_k)
        aux, z = router_losses(ids, probs, logits, cfg.experts)
        aux_total = aux_total + cfg.aux_coef * aux
        z_total = z_total + cfg.z_coef * z
        ew = [tuple(params[p + "block_sparse_moe.experts.%d.w%d.weight" % (e, n)] for n in (1, 2, 3))
              for e in range(cfg.experts)]
        h = r + moe(x, ids, gates, ew).view(B, S, cfg.hidden)
    hn = rms_norm(h, params["model.norm.weight"], cfg.eps)
    logits = hn @ params["lm_head.weight"].t()
    lm = torch.nn.functional.cross_entropy(logits.reshape(B * S, cfg.vocab), targets.reshape(-1))
    return lm, aux_total, z_total


# ---------------------------------------------------------------- check

def byte_ids(t, name, vocab):
    """Float [B, S] byte ids -> long, raising BadInput unless integral in [0, vocab)."""
    import torch
    if t.dim() != 2:
        raise BadInput("batch: %s must be [B, S], got %s" % (name, list(t.shape)))
    ids = t.round()
    if not torch.equal(ids, t) or (ids < 0).any() or (ids >= vocab).any():
        raise BadInput("batch: %s must hold integer ids in [0, %d)" % (name, vocab))
    return ids.to(torch.int64)


def group_name(name):
    """Parameter name with layer and expert indices replaced by '*'."""
    return re.sub(r"\.\d+\.", ".*.", re.sub(r"\.\d+\.", ".*.", name))


def close_scalar(got, want):
    return abs(got - want) <= max(1e-5 * abs(want), 1e-6)


def load_check_inputs(d):
    """(cfg, params, inputs, targets, expected) from DIR; raises BadInput."""
    import torch
    paths = {n: os.path.join(d, n) for n in
             ("config.json", "model.safetensors", "batch.safetensors", "expected.safetensors")}
    for p in paths.values():
        if not os.path.isfile(p):
            raise BadInput("missing file: " + p)
    cfg = load_config(paths["config.json"])
    model = read_safetensors(paths["model.safetensors"])
    shapes = param_shapes(cfg)
    missing = sorted(set(shapes) - set(model))
    extra = sorted(set(model) - set(shapes))
    if missing or extra:
        raise BadInput("model.safetensors: names differ from the model's: missing %s, extra %s"
                       % (missing[:5], extra[:5]))
    for n, s in shapes.items():
        if tuple(model[n].shape) != s:
            raise BadInput("model.safetensors: %s has shape %s, want %s" % (n, list(model[n].shape), list(s)))
    batch = read_safetensors(paths["batch.safetensors"])
    for n in ("inputs", "targets"):
        if n not in batch:
            raise BadInput("batch.safetensors: no tensor '%s'" % n)
    inputs = byte_ids(batch["inputs"], "inputs", cfg.vocab)
    targets = byte_ids(batch["targets"], "targets", cfg.vocab)
    if inputs.shape != targets.shape or inputs.shape[1] > cfg.seq_len or inputs.numel() == 0:
        raise BadInput("batch: inputs %s / targets %s must match, with 1 <= S <= %d"
                       % (list(inputs.shape), list(targets.shape), cfg.seq_len))
    expected = read_safetensors(paths["expected.safetensors"])
    for n in ("loss", "aux_loss", "z_loss"):
        if n not in expected or expected[n].numel() != 1:
            raise BadInput("expected.safetensors: no scalar '%s'" % n)
    params = {n: model[n].clone().requires_grad_(True) for n in shapes}
    return cfg, params, inputs, targets, expected


def run_check(d, threads):
    torch = import_torch()
    if threads > 0:
        torch.set_num_threads(threads)
    cfg, params, inputs, targets, expected = load_check_inputs(d)
    lm, aux, z = forward(params, cfg, inputs, targets)
    (lm + aux + z).backward()

    ok = True
    parts = []
    for name, got in (("loss", lm), ("aux_loss", aux), ("z_loss", z)):
        g, w = float(got), float(expected[name].reshape(-1)[0])
        good = close_scalar(g, w)
        ok &= good
        parts.append("%s torch %.9g cpp %.9g%s" % (name, g, w, "" if good else " MISMATCH"))
    print("losses: " + "; ".join(parts))
    losses_ok = ok

    want_names = {"grad:" + n for n in params}
    have_names = {n for n in expected if n.startswith("grad:")}
    if want_names != have_names:
        ok = False
        print("gradient names differ: missing %s, extra %s"
              % (sorted(want_names - have_names)[:5], sorted(have_names - want_names)[:5]))

    groups = {}  # group -> (worst ratio, tensor name, count)
    worst = (0.0, "")
    for n, p in params.items():
        key = "grad:" + n
        if key not in expected:
            continue
        g_t = p.grad if p.grad is not None else torch.zeros_like(p)
        g_c = expected[key]
        if tuple(g_c.shape) != tuple(g_t.shape):
            ok = False
            print("%s: shape %s, want %s" % (key, list(g_c.shape), list(g_t.shape)))
            continue
        diff = float((g_t - g_c).abs().max()) if g_t.numel() else 0.0
        scale = max(float(g_t.abs().max()) if g_t.numel() else 0.0, 1e-6)
        ratio = diff / scale if math.isfinite(diff) else float("inf")
        gn = group_name(n)
        prev = groups.get(gn, (-1.0, "", 0))
        groups[gn] = (max(prev[0], ratio), n if ratio > prev[0] else prev[1], prev[2] + 1)
        if ratio > worst[0] or not worst[1]:
            worst = (ratio, n)
    for gn, (r, n, c) in groups.items():
        bad = r > 1e-4
        ok &= not bad
        print("%-52s %4d tensors  worst max|dg|/max|g| %.3e (%s)%s"
              % (gn, c, r, n, "  MISMATCH" if bad else ""))
    print("torch check: %s (%d tensors, worst gradient ratio %.3e at %s, tolerance 1e-4%s)"
          % ("PASS" if ok else "FAIL", len(params), worst[0], worst[1],
             "" if losses_ok else "; losses MISMATCH"))
    return EXIT_PASS if ok else EXIT_FAIL


# ---------------------------------------------------------------- bench

def batch_source(args, torch):
    """Returns next_batch() -> (inputs, targets) long [B, S]: random bytes or corpus windows."""
    g = torch.Generator().manual_seed(args.seed + 1)
    B, S = args.batch, args.seq_len
    if not args.corpus:
        def random_batch():
            b = torch.randint(0, 256, (B, S + 1), generator=g)
            return b[:, :-1].contiguous(), b[:, 1:].contiguous()
        return random_batch
    opener = gzip.open if args.corpus.endswith(".gz") else open
    with opener(args.corpus, "rb") as f:
        data = f.read()
    if len(data) < S + 1:
        raise BadInput("corpus %s has %d bytes, need at least %d" % (args.corpus, len(data), S + 1))
    corpus = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64)
    offsets = torch.arange(S + 1)

    def corpus_batch():
        starts = torch.randint(0, len(data) - S, (B,), generator=g)
        b = corpus[starts[:, None] + offsets[None, :]]
        return b[:, :-1].contiguous(), b[:, 1:].contiguous()
    return corpus_batch


def run_bench(args):
    torch = import_torch()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = Config(hidden=args.hidden, ffn=args.expert_ffn, layers=args.layers, heads=args.heads,
                 kv_heads=args.kv_heads, experts=args.experts, top_k=args.top_k, vocab=256,
                 seq_len=args.seq_len, window=args.sliding_window, aux_coef=args.aux_loss,
                 z_coef=args.z_loss)
    params = init_params(cfg, seed=args.seed)
    # Decay matrices only, not norm gains (as disagmoe's ParameterSet and nanoGPT).
    groups = [{"params": [p for p in params.values() if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    next_batch = batch_source(args, torch)
    all_params = list(params.values())

    def step():
        inputs, targets = next_batch()
        lm, aux, z = forward(params, cfg, inputs, targets)
        opt.zero_grad(set_to_none=True)
        (lm + aux + z).backward()
        torch.nn.utils.clip_grad_norm_(all_params, 1.0)
        opt.step()
        return float(lm)

    for _ in range(args.warmup_steps):
        step()
    loss = float("nan")
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    seconds = time.perf_counter() - t0
    tokens = args.steps * args.batch * args.seq_len
    print(json.dumps({"tokens_per_second": tokens / seconds if seconds > 0 else 0.0,
                      "seconds": seconds, "steps": args.steps, "final_loss": loss,
                      "threads": args.threads}))
    return EXIT_PASS


# ---------------------------------------------------------------- CLI

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="compare C++ losses and gradients with torch autograd")
    c.add_argument("dir", help="directory with config.json, model/batch/expected.safetensors")
    c.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    b = sub.add_parser("bench", help="time AdamW training steps; print one JSON line")
    for flag, default, what in (("--layers", 4, "decoder layers"), ("--hidden", 128, "hidden size"),
                                ("--heads", 4, "query heads"), ("--kv-heads", 2, "key/value heads"),
                                ("--experts", 8, "experts per layer"), ("--top-k", 2, "experts per token"),
                                ("--expert-ffn", 256, "expert FFN width"), ("--seq-len", 64, "sequence length"),
                                ("--batch", 16, "sequences per step"), ("--steps", 10, "timed steps"),
                                ("--warmup-steps", 3, "untimed steps first"),
                                ("--threads", 1, "torch.set_num_threads"),
                                ("--sliding-window", 0, "attention window (0: full causal)"),
                                ("--seed", 0, "random seed")):
        b.add_argument(flag, type=int, default=default, help="%s (default %d)" % (what, default))
    b.add_argument("--aux-loss", type=float, default=0.0, help="router_aux_loss_coef (default 0)")
    b.add_argument("--z-loss", type=float, default=0.0, help="router z-loss coefficient (default 0)")
    b.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate (default 3e-3)")
    b.add_argument("--corpus", default="", help="train on windows of this text file (.gz ok)")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.cmd == "check":
            return run_check(args.dir, args.threads)
        return run_bench(args)
    except BadInput as e:
        prefix = "torch check: " if args.cmd == "check" else "torch bench: "
        print(prefix + str(e))
        return EXIT_BAD


if __name__ == "__main__":
    sys.exit(main())
