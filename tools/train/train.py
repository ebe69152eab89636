#!/usr/bin/env python3
"""Quantisation-aware training of the shipped BitNet b1.58 model (model.py) on the corpus of
corpus.py with the vocabulary of bpe.py. CPU only; the learning rate follows a cosine over the
wall-time budget, so a run always ends annealed, and a checkpoint plus an exported GGUF are
written every --ckpt-min minutes (a partial run is usable).

  train.py --corpus DIR --vocab vocab.json --out OUTDIR --minutes 50 [--dim 256 --layers 4 ...]

OUTDIR gets ckpt.pt, model.gguf, log.txt (one line per logging step) and summary.json."""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import export as X  # noqa: E402
import facts as FACTS  # noqa: E402
import model as M  # noqa: E402


CHAT_CUE = "Assistant: "


def encode_doc(vocab, text):
    """A chat is encoded as the engine sees it: the rendered prompt ends with "Assistant: " (its
    last token the lone space) and the answer continues from there, so each answer is encoded
    on its own after the cue rather than as " The" joined to the space."""
    parts = text.split(CHAT_CUE)
    ids = []
    for i, p in enumerate(parts):
        ids.extend(vocab.encode(p + (CHAT_CUE if i + 1 < len(parts) else "")))
    return ids


def encode_docs(path, vocab):
    ids = []
    with open(path) as f:
        for line in f:
            ids.append(vocab.bos)
            ids.extend(encode_doc(vocab, json.loads(line)))
            ids.append(vocab.eos)
    return np.array(ids, dtype=np.int32)


@torch.no_grad()
def evaluate(net, data, T, n_windows=32):
    net.eval()
    tot, cnt = 0.0, 0
    step = max(1, (len(data) - T - 1) // n_windows)
    for i in range(n_windows):
        s = i * step
        if s + T + 1 > len(data):
            break
        x = torch.from_numpy(data[s:s + T].astype(np.int64))[None]
        y = torch.from_numpy(data[s + 1:s + T + 1].astype(np.int64))[None]
        lg = net(x)
        tot += F.cross_entropy(lg.view(-1, lg.shape[-1]), y.view(-1), reduction="sum").item()
        cnt += y.numel()
    net.train()
    return tot / max(cnt, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=50)
    ap.add_argument("--ckpt-min", type=float, default=5)
    ap.add_argument("--stop-min", type=float, default=None,
                    help="stop (with a checkpoint) at this elapsed time, before the schedule ends; --resume continues")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--wd", type=float, default=0.05)
    ap.add_argument("--sparsity", type=float, default=0.0, help="weight of the FFN activation L1 term")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--embed-std", type=float, default=0.02,
                    help="embedding init: small, so that rows the corpus rarely updates stay near zero and do "
                         "not swamp describe's gate scores and down_meta's top tokens with noise")
    ap.add_argument("--describe", type=float, default=0.0,
                    help="weight of the describe term (model.describe_loss): every fact of facts.py, each step, "
                         "scored with a vindex's describe arithmetic")
    ap.add_argument("--describe-alpha", type=float, default=4.0,
                    help="the embedding scale the model is exported with (export.py --alpha): describe's units")
    ap.add_argument("--describe-tau", type=float, default=2.0, help="temperature of p(feature | entity) over gate scores")
    ap.add_argument("--describe-label-temp", type=float, default=0.1,
                    help="temperature of P(token | feature) over down_meta logits (low: describe's argmax)")
    ap.add_argument("--describe-layers", default=None, help="comma-separated layers (default: all, as describe scans)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init", help="start from this checkpoint's weights with a fresh optimiser and schedule")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    vocab = bpe.Vocab.load(a.vocab)
    t0 = time.time()
    train = encode_docs(os.path.join(a.corpus, "train.jsonl"), vocab)
    valid = encode_docs(os.path.join(a.corpus, "valid.jsonl"), vocab)
    print("tokens: train %d, valid %d (encoded in %.0fs)" % (len(train), len(valid), time.time() - t0), file=sys.stderr)
    c = dict(vocab=len(vocab.tokens), dim=a.dim, ffn=a.ffn, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads,
             ctx=a.seq, eps=1e-5, rope_theta=10000.0, embed_std=a.embed_std, out_norm_init=1.0)
    net = M.BitNet(c)
    n_params = sum(p.numel() for p in net.parameters())
    decay = [p for n, p in net.named_parameters() if p.dim() == 2 and n != "embed"]
    rest = [p for n, p in net.named_parameters() if not (p.dim() == 2 and n != "embed")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    seen, step, elapsed0 = 0, 0, 0.0
    ck_path = os.path.join(a.out, "ckpt.pt")
    if a.resume and os.path.exists(ck_path):
        ck = torch.load(ck_path)
        net.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        seen, step, elapsed0 = ck["tokens"], ck["step"], ck["elapsed"]
    if a.init:
        net.load_state_dict(torch.load(a.init)["model"])
    budget = a.minutes * 60
    ent_ids, obj_ids = [], []
    for e, _, o in FACTS.facts():
        ie, io = vocab.encode(e), vocab.encode(o)
        if len(ie) != 1 or len(io) != 1:
            sys.exit("train.py: %s / %s is not one token in this vocabulary" % (e, o))
        ent_ids.append(ie[0])
        obj_ids.append(io[0])
    ent_ids, obj_ids = torch.tensor(ent_ids), torch.tensor(obj_ids)
    d_layers = [int(x) for x in a.describe_layers.split(",")] if a.describe_layers else list(range(a.layers))
    dnll = None
    rng = np.random.default_rng(a.seed + step)
    log = open(os.path.join(a.out, "log.txt"), "a")
    start = time.time() - elapsed0
    last_ck = time.time()
    ema = None

    def save(final=False):
        el = time.time() - start
        vl = evaluate(net, valid, a.seq)
        torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "config": c, "merges": vocab.merges,
                    "tokens": seen, "step": step, "elapsed": el}, ck_path + ".tmp")
        os.replace(ck_path + ".tmp", ck_path)
        X.export(net, vocab, os.path.join(a.out, "model.gguf"))
        summ = {"params": n_params, "config": c, "train_tokens_seen": seen, "corpus_tokens": int(len(train)),
                "steps": step, "wall_seconds": round(el, 1), "train_loss_ema": ema, "valid_loss": vl,
                "valid_ppl": math.exp(vl), "final": final}
        with open(os.path.join(a.out, "summary.json"), "w") as f:
            json.dump(summ, f, indent=1)
        print("checkpoint: step %d tokens %d loss %.4f valid %.4f (ppl %.2f)" % (step, seen, ema or 0, vl, math.exp(vl)),
              file=sys.stderr)
        log.write("ckpt step %d tokens %d valid_loss %.4f\n" % (step, seen, vl))
        log.flush()

    net.train()
    T, B = a.seq, a.batch
    while True:
        el = time.time() - start
        if el >= budget or (a.stop_min is not None and el >= a.stop_min * 60):
            break
        frac = el / budget
        warm = 0.03
        lr = a.lr * (frac / warm if frac < warm else 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (frac - warm) / (1 - warm))))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, len(train) - T - 1, size=B)
        xb = torch.from_numpy(np.stack([train[s:s + T] for s in starts]).astype(np.int64))
        yb = torch.from_numpy(np.stack([train[s + 1:s + T + 1] for s in starts]).astype(np.int64))
        lg = net(xb)
        loss = F.cross_entropy(lg.view(-1, lg.shape[-1]), yb.view(-1))
        total = loss
        if a.sparsity > 0:
            total = loss + a.sparsity * sum(b.l1 for b in net.blocks) / len(net.blocks)
        if a.describe > 0:
            dl, dn = M.describe_loss(net, ent_ids, obj_ids, d_layers, a.describe_alpha, a.describe_tau,
                                     a.describe_label_temp)
            total = total + a.describe * dl
            dnll = dn.mean().item()
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        step += 1
        seen += B * T
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if step % 20 == 0:
            el = time.time() - start
            l1 = sum(b.l1.item() for b in net.blocks) / len(net.blocks)
            log.write("step %d tokens %d loss %.4f ema %.4f l1 %.3f lr %.2e elapsed %.0f tok/s %.0f%s\n" %
                      (step, seen, loss.item(), ema, l1, lr, el, seen / max(el, 1e-9),
                       "" if dnll is None else " describe_nll %.3f" % dnll))
            log.flush()
        if time.time() - last_ck > a.ckpt_min * 60:
            save()
            last_ck = time.time()
    save(final=time.time() - start >= budget)


if __name__ == "__main__":
    main()
