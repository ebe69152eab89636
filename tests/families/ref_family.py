#!/usr/bin/env python3
"""Independent reference forward pass for the BitNet families' GGUF layouts (stdlib only).

It reads the GGUF itself (its own parser, its own I2_S, TQ2_0, TQ1_0 and F16 decoders) and implements each
family's block from the published descriptions, not from larql's C code:

  x = E[tok]
  per layer:  h = rmsnorm(x) * attn_norm
              q, k, v = BL(Wq, h), BL(Wk, h), BL(Wv, h)
              RoPE: NEOX pairs (i, i + n_rot/2) for bitnet* archs (microsoft's converter keeps
                    HF's rotate_half layout), adjacent pairs (2i, 2i+1) for llama (the
                    converter permutes q/k rows for llama.cpp's NORM rope)
              a = causal softmax(q.k / sqrt(hd)) . v, query head h reads kv head h // group
              a = rmsnorm(a) * attn_sub_norm        (only when the file has sub-norms)
              x += BL(Wo, a)
              n = rmsnorm(x) * ffn_norm
              f = relu(g)^2 * u  (bitnet-b1.58 / bitnet-25)  or  silu(g) * u  (bitnet, llama)
              f = rmsnorm(f) * ffn_sub_norm          (only when present)
              x += BL(Wdown, f)
  logits = W_out . (rmsnorm(x) * output_norm), W_out = output.weight or token_embd (tied)

BL(W, v) for a ternary (I2_S, TQ2_0, TQ1_0) W: v quantised per token to int8 with absmax (scale
127 / max(amax, 1e-5), round half to even, clamp [-128, 127]), then
W.scale * sum(trit * q) / scale (TQ: sum over 256-blocks of the block's f16 d times the
block's sum(trit * q), times the optional "<name>.scale" companion) — the W1.58A8 definition of BitNet b1.58 and of
transformers' BitLinear. --act float skips the quantisation (the float reference).

Usage:
  ref_family.py MODEL.gguf --ids 1,2,3 --gen N [--act int8|float]
      prints one JSON object: {"ids": [...prompt + greedy...], "logits": [[...], ...],
      "near_ties": n} (logits after every prefix of the full sequence, the last one included;
      near_ties: activations quantised within TIE_MARGIN of a rounding tie, see Model.bl)
"""
import argparse
import json
import math
import struct
import sys

GGML_F32, GGML_F16, GGML_TQ1_0, GGML_TQ2_0, GGML_I2_S = 0, 1, 34, 35, 36
# |x*scale - (n + .5)| below this (in int8 steps) counts as a near-tie (see Model.bl); float32
# accumulation order moves values by ~1e-5 steps at most on these small models
TIE_MARGIN = float(__import__("os").environ.get("LQ_TIE_MARGIN", "3e-5"))


def f32(v):
    """v rounded to the nearest float32."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


class Reader:
    def __init__(self, data):
        self.d = data
        self.o = 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.o)
        self.o += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = self.d[self.o:self.o + n].decode("utf-8", "replace")
        self.o += n
        return s

    def value(self, t):
        scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
        if t in scalar:
            return self.take(scalar[t])
        if t == 8:
            return self.string()
        if t == 9:
            et = self.take("I")
            n = self.take("Q")
            return [self.value(et) for _ in range(n)]
        raise ValueError("unknown GGUF value type %d" % t)


def read_gguf(path):
    data = open(path, "rb").read()
    r = Reader(data)
    if data[:4] != b"GGUF":
        raise ValueError("not a GGUF")
    r.o = 4
    r.take("I")  # version
    n_t = r.take("Q")
    n_kv = r.take("Q")
    kv = {}
    for _ in range(n_kv):
        k = r.string()
        kv[k] = r.value(r.take("I"))
    infos = []
    for _ in range(n_t):
        name = r.string()
        nd = r.take("I")
        ne = [r.take("Q") for _ in range(nd)]
        typ = r.take("I")
        off = r.take("Q")
        infos.append((name, ne, typ, off))
    align = kv.get("general.alignment", 32)
    base = (r.o + align - 1) // align * align
    tensors = {}
    for name, ne, typ, off in infos:
        tensors[name] = (ne, typ, base + off)
    return data, kv, tensors


def f16_rows(data, off, rows, cols):
    n = rows * cols
    vals = struct.unpack_from("<%de" % n, data, off)
    return [list(vals[r * cols:(r + 1) * cols]) for r in range(rows)]


def f32_rows(data, off, rows, cols):
    n = rows * cols
    vals = struct.unpack_from("<%df" % n, data, off)
    return [list(vals[r * cols:(r + 1) * cols]) for r in range(rows)]


def i2s_rows(data, off, rows, cols):
    """I2_S (x86): 128-element blocks of 32 bytes; element j of a block in byte j % 32 at
    shift 6 - 2 * (j // 32); code 0/1/2 = -1/0/+1; one f32 scale at byte n/4. The blocks run
    over the flattened tensor (microsoft's quantize_i2_s): a row whose length is not a
    multiple of 128 (1bitLLM 3B's ffn_down, 8640) starts inside a block."""
    n = rows * cols
    assert n % 128 == 0, "I2_S tensor of %d elements: not whole blocks" % n
    assert off + n // 4 + 4 <= len(data), "I2_S tensor past the end of the file"
    packed = data[off:off + n // 4]
    scale = struct.unpack_from("<f", data, off + n // 4)[0]
    flat = [0] * n
    for blk in range(n // 128):
        b0 = blk * 32
        e0 = blk * 128
        for g in range(32):
            byte = packed[b0 + g]
            for part in range(4):
                code = (byte >> (6 - 2 * part)) & 3
                flat[e0 + part * 32 + g] = code - 1
    return [flat[r * cols:(r + 1) * cols] for r in range(rows)], scale


def tq_rows(data, off, rows, cols, typ):
    """llama.cpp's TQ2_0 / TQ1_0: 256-element blocks, each its codes then an f16 d.
    TQ2_0 (66 bytes): qs[64]; element e in qs[(e // 128) * 32 + e % 32] at bits
    2 * ((e % 128) // 32); trit = code - 1.
    TQ1_0 (54 bytes): qs[48], qh[4]; a byte holds base-3 digits scaled to 0..255
    (ceil(v * 256 / 243)); digit n of byte b is ((b * 3**n) % 256 * 3) >> 8. qs[m], m < 32:
    elements n * 32 + m (n < 5); qs[32 + m], m < 16: 160 + n * 16 + m; qh[m]: 240 + n * 4 + m
    (n < 4). Returns (trit rows, per-row lists of block scales)."""
    size = 66 if typ == GGML_TQ2_0 else 54
    nb = cols // 256
    trits, scales = [], []
    for r in range(rows):
        row, ds = [], []
        for b in range(nb):
            o = off + (r * nb + b) * size
            blk = data[o:o + size]
            ds.append(struct.unpack_from("<e", blk, size - 2)[0])
            t = [0] * 256
            if typ == GGML_TQ2_0:
                for e in range(256):
                    t[e] = ((blk[(e // 128) * 32 + e % 32] >> (2 * ((e % 128) // 32))) & 3) - 1
            else:
                dig = lambda q, n: (((q * 3 ** n) % 256) * 3 >> 8) - 1
                for n in range(5):
                    for m in range(32):
                        t[n * 32 + m] = dig(blk[m], n)
                    for m in range(16):
                        t[160 + n * 16 + m] = dig(blk[32 + m], n)
                for n in range(4):
                    for m in range(4):
                        t[240 + n * 4 + m] = dig(blk[48 + m], n)
            row += t
        trits.append(row)
        scales.append(ds)
    return trits, scales


class Model:
    def __init__(self, path, act):
        data, kv, t = read_gguf(path)
        self.arch = kv["general.architecture"]
        A = self.arch
        self.D = kv[A + ".embedding_length"]
        self.L = kv[A + ".block_count"]
        self.F = kv[A + ".feed_forward_length"]
        self.H = kv[A + ".attention.head_count"]
        self.HKV = kv.get(A + ".attention.head_count_kv", self.H)
        self.hd = kv.get(A + ".attention.key_length", self.D // self.H)
        self.n_rot = kv.get(A + ".rope.dimension_count", self.hd)
        self.theta = kv.get(A + ".rope.freq_base", 10000.0)
        self.eps = kv.get(A + ".attention.layer_norm_rms_epsilon", 1e-5)
        self.neox = A.startswith("bitnet")
        self.relu2 = A in ("bitnet-b1.58", "bitnet-25")
        self.act = act
        self.near_ties = 0
        self.data, self.t = data, t

        self.embd = self.dense("token_embd.weight")
        self.V = len(self.embd)
        self.out = self.dense("output.weight") if "output.weight" in t else self.embd
        self.out_norm = self.vec("output_norm.weight")
        self.layers = []
        for l in range(self.L):
            p = "blk.%d." % l
            lay = {}
            for k in ("attn_norm", "ffn_norm", "attn_sub_norm", "ffn_sub_norm"):
                lay[k] = self.vec(p + k + ".weight") if p + k + ".weight" in t else None
            for k in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
                lay[k] = self.mat(p + k + ".weight")
            self.layers.append(lay)
        # Which projections are BitLinear (int8 activations): every bitnet* arch, and a llama
        # file whose projections are I2_S (bitnet.cpp's converter for HF1BitLLM / Falcon3 /
        # Falcon-E, trained as BitLinear). A llama file in TQ1_0/TQ2_0 (a TriLM-style model
        # through llama-quantize; TriLM trains ternary weights against float activations) and
        # a dense llama run float activations.
        if not self.arch.startswith("bitnet") and not any(
                lay["attn_q"][0] == "t" for lay in self.layers):
            self.act = "float"

    def vec(self, name):
        ne, typ, off = self.t[name]
        assert typ == GGML_F32, name
        return list(struct.unpack_from("<%df" % ne[0], self.data, off))

    def dense(self, name):
        ne, typ, off = self.t[name]
        cols, rows = ne
        if typ == GGML_F16:
            return f16_rows(self.data, off, rows, cols)
        if typ == GGML_F32:
            return f32_rows(self.data, off, rows, cols)
        raise ValueError("%s: type %d" % (name, typ))

    def mat(self, name):
        """('t', trit rows, scale) for I2_S, ('d', float rows) otherwise."""
        ne, typ, off = self.t[name]
        cols, rows = ne
        if typ == GGML_I2_S:
            w, s = i2s_rows(self.data, off, rows, cols)
            return ("t", w, s)
        if typ in (GGML_TQ1_0, GGML_TQ2_0):
            w, ds = tq_rows(self.data, off, rows, cols, typ)
            comp = name[:-len(".weight")] + ".scale"
            mult = struct.unpack_from("<f", self.data, self.t[comp][2])[0] if comp in self.t else 1.0
            return ("b", w, ds, mult)
        return ("d", self.dense(name))

    @staticmethod
    def tq_dot(row, ds, x):
        """sum over 256-blocks of d_b * sum(trit * x) over the block."""
        return sum(d * sum(a * b for a, b in zip(row[i * 256:(i + 1) * 256], x[i * 256:(i + 1) * 256]))
                   for i, d in enumerate(ds))

    def bl(self, m, x):
        if m[0] == "d":
            return [sum(a * b for a, b in zip(row, x)) for row in m[1]]
        if m[0] == "b" and self.act == "float":
            return [m[3] * self.tq_dot(row, ds, x) for row, ds in zip(m[1], m[2])]
        if m[0] == "t" and self.act == "float":
            return [m[2] * sum(a * b for a, b in zip(row, x)) for row in m[1]]
        # The quantiser's scale, its products and the output factor in float32, as every
        # runtime computes them: a llama block has no sub-norm before o_proj, so with one
        # key (position 0) its input is a BitLinear output, a multiple of one constant, and
        # x * qs lands on exact .5 ties that only float32 values decide the same way.
        amax = max(abs(v) for v in x)
        qs = f32(127.0 / f32(max(amax, 1e-5)))
        scaled = [f32(f32(v) * qs) for v in x]
        # A value this close to a .5 tie rounds by the last bits of float32 accumulation
        # order (attention, norms), which no two implementations share: count them, so that a
        # test can tell a real mismatch from a coin toss (exact ties, from lattice inputs,
        # are computed identically above and do not count).
        for z in scaled:
            d = abs(abs(z) % 1.0 - 0.5)
            if 0.0 < d < TIE_MARGIN:
                self.near_ties += 1
        q = [min(127, max(-128, round(z))) for z in scaled]
        if m[0] == "b":
            k = f32(f32(1.0 / qs) * f32(m[3]))
            return [f32(self.tq_dot(row, ds, q) * k) for row, ds in zip(m[1], m[2])]
        k = f32(f32(1.0 / qs) * f32(m[2]))
        return [f32(sum(a * b for a, b in zip(row, q)) * k) for row in m[1]]

    def rmsnorm(self, x, w):
        ms = sum(v * v for v in x) / len(x)
        r = 1.0 / math.sqrt(ms + self.eps)
        return [v * r * g for v, g in zip(x, w)]

    def rope(self, v, pos):
        out = list(v)
        half = self.n_rot // 2
        for i in range(half):
            f = self.theta ** (-2.0 * i / self.n_rot)
            c, s = math.cos(pos * f), math.sin(pos * f)
            i0, i1 = (i, i + half) if self.neox else (2 * i, 2 * i + 1)
            a, b = v[i0], v[i1]
            out[i0] = a * c - b * s
            out[i1] = a * s + b * c
        return out

    def step(self, tok, pos, cache):
        hd, H, HKV = self.hd, self.H, self.HKV
        x = list(self.embd[tok])
        for l, lay in enumerate(self.layers):
            h = self.rmsnorm(x, lay["attn_norm"])
            q = self.bl(lay["attn_q"], h)
            k = self.bl(lay["attn_k"], h)
            v = self.bl(lay["attn_v"], h)
            q = sum((self.rope(q[i * hd:(i + 1) * hd], pos) for i in range(H)), [])
            k = sum((self.rope(k[i * hd:(i + 1) * hd], pos) for i in range(HKV)), [])
            cache[l][0].append(k)
            cache[l][1].append(v)
            att = []
            grp = H // HKV
            for hh in range(H):
                kh = hh // grp
                qh = q[hh * hd:(hh + 1) * hd]
                sc = [sum(a * b for a, b in zip(qh, kk[kh * hd:(kh + 1) * hd])) / math.sqrt(hd)
                      for kk in cache[l][0]]
                m = max(sc)
                e = [math.exp(s - m) for s in sc]
                z = sum(e)
                o = [0.0] * hd
                for w, vv in zip(e, cache[l][1]):
                    for d in range(hd):
                        o[d] += w / z * vv[kh * hd + d]
                att += o
            if lay["attn_sub_norm"] is not None:
                att = self.rmsnorm(att, lay["attn_sub_norm"])
            x = [a + b for a, b in zip(x, self.bl(lay["attn_output"], att))]
            n = self.rmsnorm(x, lay["ffn_norm"])
            g = self.bl(lay["ffn_gate"], n)
            u = self.bl(lay["ffn_up"], n)
            if self.relu2:
                f = [max(a, 0.0) ** 2 * b for a, b in zip(g, u)]
            else:
                f = [a / (1.0 + math.exp(-a)) * b for a, b in zip(g, u)]
            if lay["ffn_sub_norm"] is not None:
                f = self.rmsnorm(f, lay["ffn_sub_norm"])
            x = [a + b for a, b in zip(x, self.bl(lay["ffn_down"], f))]
        hn = self.rmsnorm(x, self.out_norm)
        return [sum(a * b for a, b in zip(row, hn)) for row in self.out]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--act", choices=("int8", "float"), default="int8")
    a = ap.parse_args()
    m = Model(a.model, a.act)
    ids = [int(s) for s in a.ids.split(",")]
    cache = [([], []) for _ in range(m.L)]
    logits = []
    seq = list(ids)
    pos = 0
    while True:
        lg = m.step(seq[pos], pos, cache)
        logits.append(lg)
        pos += 1
        if pos < len(seq):
            continue
        if len(seq) - len(ids) >= a.gen:
            break
        seq.append(max(range(len(lg)), key=lambda i: lg[i]))
    json.dump({"ids": seq, "logits": logits, "near_ties": m.near_ties}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
