"""BitNet b1.58 in PyTorch, exactly as larql's C engine runs it (DESIGN.md "Numerics"):

  x = E[id] (the tied embedding, stored F16)
  per layer: h = rmsnorm(x)*attn_norm; q,k,v = BitLinear(h); split-half (NeoX) RoPE on q,k;
             causal softmax(q.k/sqrt(hd)) v; rmsnorm(.)*attn_sub_norm; x += BitLinear_o(.)
             h = rmsnorm(x)*ffn_norm; g,u = BitLinear(h); a = relu(g)^2 * u;
             rmsnorm(a)*ffn_sub_norm; x += BitLinear_down(.)
  logits = (rmsnorm(x)*output_norm) . E^T
  BitLinear(x) = (int8(x) . trits(W)) * absmean(W) / s, with per-token absmax int8 activations
  (s = 127/max(amax, 1e-5), round half to even, clamp [-128, 127]) and absmean ternary weights
  (trits = clamp(round(W / mean|W|), -1, 1)).

Training uses straight-through estimators for the weight and activation rounding (and for the
F16 rounding of the embedding), so the forward pass is the exported model's forward pass."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def ternary(w):
    """(trits, scale): the absmean quantisation microsoft's converter applies."""
    scale = w.abs().mean().clamp(min=1e-8)
    return (w / scale).round().clamp(-1, 1), scale


def act_quant(x):
    """Per-token absmax int8 as the engine's int8 path: (q as float, 1/s)."""
    amax = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-5)
    s = 127.0 / amax
    q = (x * s).round().clamp(-128, 127)  # torch.round is half-to-even
    return q, 1.0 / s


class BitLinear(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_out, n_in) * (1.0 / math.sqrt(n_in)))

    def forward(self, x, act_float=False):
        t, scale = ternary(self.weight)
        w_q = self.weight + (t * scale - self.weight).detach()
        if act_float:
            return F.linear(x, w_q)
        q, inv = act_quant(x)
        x_q = x + (q * inv - x).detach()
        return F.linear(x_q, w_q)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        D, Fd, H, KV = c["dim"], c["ffn"], c["heads"], c["kv_heads"]
        hd = D // H
        self.c = c
        self.attn_norm = nn.Parameter(torch.ones(D))
        self.q = BitLinear(D, D)
        self.k = BitLinear(D, KV * hd)
        self.v = BitLinear(D, KV * hd)
        self.attn_sub_norm = nn.Parameter(torch.ones(D))
        self.o = BitLinear(D, D)
        self.ffn_norm = nn.Parameter(torch.ones(D))
        self.gate = BitLinear(D, Fd)
        self.up = BitLinear(D, Fd)
        self.ffn_sub_norm = nn.Parameter(torch.ones(Fd))
        self.down = BitLinear(Fd, D)

    def forward(self, x, cos, sin, act_float=False):
        c = self.c
        B, T, D = x.shape
        H, KV, eps = c["heads"], c["kv_heads"], c["eps"]
        hd = D // H
        h = rmsnorm(x, self.attn_norm, eps)
        q = self.q(h, act_float).view(B, T, H, hd).transpose(1, 2)
        k = self.k(h, act_float).view(B, T, KV, hd).transpose(1, 2)
        v = self.v(h, act_float).view(B, T, KV, hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if KV != H:  # contiguous head groups: query head h reads kv head h // (H/KV)
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, "scaled_dot_product_attention") \
            else attention(q, k, v)
        a = a.transpose(1, 2).reshape(B, T, D)
        a = rmsnorm(a, self.attn_sub_norm, eps)
        x = x + self.o(a, act_float)
        h = rmsnorm(x, self.ffn_norm, eps)
        g, u = self.gate(h, act_float), self.up(h, act_float)
        m = F.relu(g).pow(2) * u
        # mean |m| / rms(m): the L1 of the sub-normed activation, smallest when few features
        # fire. Training adds it to the loss (--sparsity) so that each FFN feature takes one
        # role, e.g. "France -> Paris", which is what a vindex's describe reads off a feature.
        self.l1 = (m.abs().mean(-1) * torch.rsqrt(m.pow(2).mean(-1) + eps)).mean()
        m = rmsnorm(m, self.ffn_sub_norm, eps)
        return x + self.down(m, act_float)


def attention(q, k, v):
    T = q.shape[-2]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def rope_tables(T, hd, theta, dtype=torch.float32):
    half = hd // 2
    inv = theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / hd)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def rope(x, cos, sin):
    """Split-half (NeoX) rotation of x [B, H, T, hd]."""
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    T = x.shape[-2]
    c, s = cos[:T], sin[:T]
    return torch.cat([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1)


class BitNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = nn.Parameter(torch.randn(c["vocab"], c["dim"]) * c.get("embed_std", 0.02))
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.out_norm = nn.Parameter(torch.full((c["dim"],), c.get("out_norm_init", 1.0)))
        cos, sin = rope_tables(c["ctx"], c["dim"] // c["heads"], c["rope_theta"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def embedding_f16(self):
        return self.embed + (self.embed.half().float() - self.embed).detach()

    def forward(self, ids, act_float=False):
        E = self.embedding_f16()
        x = E[ids]
        for b in self.blocks:
            x = b(x, self.cos, self.sin, act_float)
        x = rmsnorm(x, self.out_norm, self.c["eps"])
        return x @ E.t()


def unit_trits(w):
    """The ternary codes of w at unit scale (what a vindex stores for an I2_S gate or down
    matrix: LARQL divides the per-tensor scale back out), with a straight-through gradient."""
    scale = w.abs().mean().clamp(min=1e-8).detach()
    x = w / scale
    return x + (x.clamp(-1, 1).round() - x).detach()


def describe_loss(net, ent_ids, obj_ids, layers, alpha, tau=2.0, label_temp=0.1, floor=10.0):
    """The describe term (README "The embedded model"): the likelihood, under the arithmetic of
    a vindex's describe, that the entity's query lands on a feature labelled with its object.

    describe scores every gate row of the scanned layers against q = alpha*E[entity] (the raw
    exported embedding; alpha is export.py's --alpha) as unit trits . q, keeps the top hits and
    labels each feature with the token whose embedding is most aligned with its down column
    (down_meta: argmax_v E[v] . trits(W_down[:, f])). Its differentiable version, for each fact
    (e, o): p(f | e) = softmax over the features of every layer in LAYERS of (trits_g[f] . q_e)
    / tau (which feature describe's top hit is), P(o | f) = softmax over the vocabulary of
    E . trits_d[:, f] / label_temp (the feature's label; a low temperature makes it nearly
    describe's argmax, so a feature whose down column sits between two objects, or spreads over
    a dozen capitals, explains none of them); the loss is -log sum_f p(f | e) P(o | f), a
    mixture, so an entity's two objects settle on two features. A hinge pulls the responsible
    features' gate score above FLOOR (describe drops hits under 5), and their label entropy is
    penalised (one label per feature: see below). Both factors go through the
    straight-through trits and the F16 embedding, so gradients move the trained weights; no
    weight is set by hand."""
    E = net.embedding_f16()
    q = alpha * E[ent_ids]                                     # [N, D], describe's query
    scores, labels = [], []
    for l in layers:
        b = net.blocks[l]
        scores.append(q @ unit_trits(b.gate.weight).t())       # [N, F] gate scores
        labels.append(torch.log_softmax(E @ unit_trits(b.down.weight) / label_temp, dim=0))  # [V, F] down_meta
    s = torch.cat(scores, dim=1)
    logp = torch.log_softmax(s / tau, dim=1)                   # p(f | e)
    labels_all = torch.cat(labels, dim=1)                      # [V, F]: log P(v | f)
    logP = labels_all[obj_ids]                                 # [N, F]: log P(o | f)
    joint = logp + logP
    nll = -torch.logsumexp(joint, dim=1)
    resp = torch.softmax(joint, dim=1).detach()                # which features carry the fact
    hinge = F.relu(floor - (resp * s).sum(1))
    # the mixture alone is as happy with one feature labelled half "Dublin", half "Irish" (or a
    # feature shared by a dozen capitals) as with two features of one label each, but describe
    # names a feature by its single top token: the label entropy of the features that carry a
    # fact is penalised, so each commits to one object and the other recruits its own feature
    ent = -(labels_all.exp() * labels_all).sum(0)              # [F] entropy of P(. | f)
    sharp = (resp * ent[None, :]).sum(1)
    return nll.mean() + 0.1 * hinge.mean() + sharp.mean(), nll.detach()
