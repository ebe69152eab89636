#!/usr/bin/env python3
"""Writes a trained checkpoint as a BitNet b1.58 GGUF in microsoft's layout, the file the C
engine loads: GGUF v3, alignment 32, `bitnet-b1.58.*` hyper-parameters as UINT32/FLOAT32,
I2_S projections (128-element blocks of 32 bytes, element j of a block in byte j%32 at shift
6-2*(j/32), codes 0/1/2 = -1/0/+1, one f32 scale at n/4, n/4 + 32 bytes in all), F32 norms,
F16 tied embedding, and the byte-level BPE vocabulary of bpe.py.

  export.py --ckpt out/ckpt.pt --out model.gguf"""
import argparse
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import model as M  # noqa: E402

GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STR, GGUF_ARR = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_F16, GGML_I2_S = 0, 1, 36
ALIGN = 32


def s_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv_bytes(key, typ, val):
    out = s_str(key) + struct.pack("<I", typ)
    if typ == GGUF_U32:
        return out + struct.pack("<I", val)
    if typ == GGUF_F32:
        return out + struct.pack("<f", val)
    if typ == GGUF_BOOL:
        return out + struct.pack("<B", 1 if val else 0)
    if typ == GGUF_STR:
        return out + s_str(val)
    et, items = val
    out += struct.pack("<IQ", et, len(items))
    if et == GGUF_STR:
        return out + b"".join(s_str(x) for x in items)
    fmt = {GGUF_F32: "<%df", GGUF_I32: "<%di"}[et]
    return out + struct.pack(fmt % len(items), *items)


def i2s_bytes(trits, scale):
    """trits: int array [rows, cols] of -1/0/+1 (row-major), cols % 128 == 0."""
    codes = (trits.reshape(-1).astype(np.int8) + 1).astype(np.uint8)  # -1,0,1 -> 0,1,2
    n = codes.size
    assert n % 128 == 0
    blk = codes.reshape(n // 128, 4, 32)
    packed = (blk[:, 0] << 6) | (blk[:, 1] << 4) | (blk[:, 2] << 2) | blk[:, 3]
    return packed.astype(np.uint8).tobytes() + struct.pack("<f", float(scale)) + b"\0" * 28


def write_gguf(path, kvs, tensors):
    """kvs: [(key, type, value)]; tensors: [(name, dims ne0-first, ggml type, bytes)]."""
    head = struct.pack("<IIQQ", 0x46554747, 3, len(tensors), len(kvs))
    head += b"".join(kv_bytes(*kv) for kv in kvs)
    off, infos = 0, b""
    for name, dims, typ, data in tensors:
        infos += s_str(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
        infos += struct.pack("<IQ", typ, off)
        off += len(data)
        off += (-off) % ALIGN
    blob = head + infos
    blob += b"\0" * ((-len(blob)) % ALIGN)
    with open(path + ".tmp", "wb") as f:
        f.write(blob)
        for _, _, _, data in tensors:
            f.write(data)
            f.write(b"\0" * ((-len(data)) % ALIGN))
    os.replace(path + ".tmp", path)


def export(net, vocab, path, name="larql-tinystories-ternary"):
    c = net.c
    A = "bitnet-b1.58"
    kvs = [("general.architecture", GGUF_STR, A), ("general.name", GGUF_STR, name),
           ("general.file_type", GGUF_U32, 40),
           (A + ".vocab_size", GGUF_U32, len(vocab.tokens)),
           (A + ".context_length", GGUF_U32, c["ctx"]),
           (A + ".embedding_length", GGUF_U32, c["dim"]),
           (A + ".block_count", GGUF_U32, c["layers"]),
           (A + ".feed_forward_length", GGUF_U32, c["ffn"]),
           (A + ".rope.dimension_count", GGUF_U32, c["dim"] // c["heads"]),
           (A + ".attention.head_count", GGUF_U32, c["heads"]),
           (A + ".attention.head_count_kv", GGUF_U32, c["kv_heads"]),
           (A + ".attention.layer_norm_rms_epsilon", GGUF_F32, c["eps"]),
           (A + ".rope.freq_base", GGUF_F32, c["rope_theta"]),
           ("tokenizer.ggml.model", GGUF_STR, "gpt2"),
           ("tokenizer.ggml.pre", GGUF_STR, "llama-bpe"),
           ("tokenizer.ggml.tokens", GGUF_ARR, (GGUF_STR, vocab.tokens)),
           ("tokenizer.ggml.scores", GGUF_ARR, (GGUF_F32, [0.0] * 256 + [-float(i + 1) for i in range(len(vocab.merges))]
                                                + [0.0] * len(bpe.SPECIALS))),
           ("tokenizer.ggml.token_type", GGUF_ARR, (GGUF_I32, [1] * (256 + len(vocab.merges)) + [3] * len(bpe.SPECIALS))),
           ("tokenizer.ggml.merges", GGUF_ARR, (GGUF_STR, ["%s %s" % m for m in vocab.merges])),
           ("tokenizer.ggml.bos_token_id", GGUF_U32, vocab.bos),
           ("tokenizer.ggml.eos_token_id", GGUF_U32, vocab.eos),
           ("tokenizer.ggml.eot_token_id", GGUF_U32, vocab.eot),
           ("tokenizer.ggml.add_bos_token", GGUF_BOOL, True),
           ("tokenizer.chat_template", GGUF_STR,
            "{% for message in messages %}{{ message['role'] | capitalize + ': ' + message['content'] | trim + '<|eot_id|>' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}")]
    T = []

    def f32(name, t):
        a = t.detach().float().cpu().numpy().astype("<f4")
        T.append((name, list(a.shape[::-1]), GGML_F32, a.tobytes()))

    def i2s(name, lin):
        trits, scale = M.ternary(lin.weight.detach().float())
        rows, cols = trits.shape
        T.append((name, [cols, rows], GGML_I2_S, i2s_bytes(trits.cpu().numpy().astype(np.int8), scale.item())))

    E = net.embed.detach().float().cpu().numpy().astype("<f2")
    T.append(("token_embd.weight", [c["dim"], c["vocab"]], GGML_F16, E.tobytes()))
    f32("output_norm.weight", net.out_norm)
    for l, b in enumerate(net.blocks):
        p = "blk.%d." % l
        f32(p + "attn_norm.weight", b.attn_norm)
        i2s(p + "attn_q.weight", b.q)
        i2s(p + "attn_k.weight", b.k)
        i2s(p + "attn_v.weight", b.v)
        f32(p + "attn_sub_norm.weight", b.attn_sub_norm)
        i2s(p + "attn_output.weight", b.o)
        f32(p + "ffn_norm.weight", b.ffn_norm)
        i2s(p + "ffn_gate.weight", b.gate)
        i2s(p + "ffn_up.weight", b.up)
        f32(p + "ffn_sub_norm.weight", b.ffn_sub_norm)
        i2s(p + "ffn_down.weight", b.down)
    write_gguf(path, kvs, T)


def rescale_embedding(net, alpha):
    """The same function with the embedding alpha times larger: the residual stream scales by
    alpha (embedding rows, and the o/down projections that add to it: their absmean scale, the
    trits unchanged), and the output norm by 1/alpha; the RMSNorms that read the residual
    remove the scale (up to their epsilon). The vindex's describe compares raw embedding . gate
    scores with a fixed threshold (5, LARQL's), which assumes the embedding scale of real models."""
    with torch.no_grad():
        net.embed.mul_(alpha)
        net.out_norm.div_(alpha)
        for b in net.blocks:
            b.o.weight.mul_(alpha)
            b.down.weight.mul_(alpha)
    net.c["embed_alpha"] = net.c.get("embed_alpha", 1.0) * alpha
    return net


def load_ckpt(path):
    ck = torch.load(path, map_location="cpu")
    net = M.BitNet(ck["config"])
    net.load_state_dict(ck["model"])
    net.eval()
    if ck.get("export_alpha", 1.0) != 1.0:
        rescale_embedding(net, ck["export_alpha"])
    return net, bpe.Vocab(ck["merges"]), ck


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--alpha", type=float, default=None,
                    help="export with the embedding scaled by ALPHA (rescale_embedding); recorded in the checkpoint")
    a = ap.parse_args()
    if a.alpha is not None:
        ck = torch.load(a.ckpt, map_location="cpu")
        ck["export_alpha"] = a.alpha
        torch.save(ck, a.ckpt)
    net, vocab, _ = load_ckpt(a.ckpt)
    export(net, vocab, a.out)
    print("wrote %s (%.2f MiB)" % (a.out, os.path.getsize(a.out) / 2**20), file=sys.stderr)


if __name__ == "__main__":
    main()
