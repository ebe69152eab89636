#!/usr/bin/env python3
"""Byte-level BPE vocabulary for the shipped model, in the form larql's GGUF tokenizer reads
(tokenizer.ggml.model = gpt2, pre = llama-bpe): ids 0-255 are the 256 byte symbols in byte
order (GPT-2's byte-to-unicode table), then one token per merge in merge order, then
<|begin_of_text|>, <|end_of_text|>, <|eot_id|>.

  bpe.py --corpus DIR/train.jsonl --vocab 4096 --out vocab.json

Pre-tokenisation is Llama 3's regex restricted to ASCII (the corpus is ASCII). Encoding applies
merges lowest rank first, leftmost on ties, which is what larql's tokenizer does.

One rule on top of plain BPE: no merge joins a leading space (or other non-letter) with the
beginning of an entity name (facts.py). So " France" is always "Ġ" + "France", and the token
"France" that `describe France` looks up is the one the model read in every sentence, not a
line-start variant it saw rarely."""
import argparse
import collections
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import facts  # noqa: E402

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
PRETOK = re.compile(r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]{1,3}| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")


def byte_table():
    bs = list(range(0x21, 0x7f)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_SYM = byte_table()


def word_syms(word):
    return tuple(BYTE_SYM[b] for b in word.encode("utf-8"))


def pretokens(text):
    return PRETOK.findall(text)


def train(docs, vocab_size, protected, keep=()):
    """docs: iterable of text; returns the merge list [(a, b)]."""
    counts = collections.Counter()
    for d in docs:
        for part in SPECIAL_RE.split(d):
            if part in SPECIALS:
                continue
            counts.update(pretokens(part))
    prefixes = set()
    for w in protected:
        for i in range(1, len(w) + 1):
            prefixes.add(w[:i])
    prefixes -= set(keep)  # a target that is also an entity's prefix (German, Germany) keeps its space
    words = [list(word_syms(w)) for w in counts]
    freq = [counts[w] for w in counts]
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for i, syms in enumerate(words):
        for a, b in zip(syms, syms[1:]):
            pairs[(a, b)] += freq[i]
            where[(a, b)].add(i)

    # symbols of the bytes that can precede a word inside one pre-token (space, quote, ...)
    nonletter = {BYTE_SYM[x] for x in range(256) if not (chr(x).isascii() and chr(x).isalnum())}

    def allowed(p):
        a, b = p
        return not (b in prefixes and a in nonletter)

    merges = []
    n_merges = vocab_size - 256 - len(SPECIALS)
    banned = set()
    while len(merges) < n_merges and pairs:
        best = None
        for p, c in pairs.most_common(64):
            if p not in banned and allowed(p):
                best = (p, c)
                break
            banned.add(p)
        if best is None:  # the 64 most common are all banned: scan everything
            cands = [(c, p) for p, c in pairs.items() if p not in banned and allowed(p)]
            if not cands:
                break
            c, p = max(cands, key=lambda t: (t[0], [-ord(ch) for ch in t[1][0] + t[1][1]]))
            best = (p, c)
        (a, b), c = best
        if c < 2:
            break
        merges.append((a, b))
        new = a + b
        for i in list(where[(a, b)]):
            syms = words[i]
            f = freq[i]
            for x, y in zip(syms, syms[1:]):
                pairs[(x, y)] -= f
                if pairs[(x, y)] <= 0:
                    del pairs[(x, y)]
                where[(x, y)].discard(i)
            out, k = [], 0
            while k < len(syms):
                if k + 1 < len(syms) and syms[k] == a and syms[k + 1] == b:
                    out.append(new)
                    k += 2
                else:
                    out.append(syms[k])
                    k += 1
            words[i] = out
            for x, y in zip(out, out[1:]):
                pairs[(x, y)] += f
                where[(x, y)].add(i)
        where.pop((a, b), None)
    return merges


class Vocab:
    def __init__(self, merges):
        self.merges = [tuple(m) for m in merges]
        self.tokens = [BYTE_SYM[b] for b in range(256)]
        self.rank = {}
        for r, (a, b) in enumerate(self.merges):
            self.rank[(a, b)] = r
            self.tokens.append(a + b)
        self.tokens += SPECIALS
        self.id = {}
        for i, t in enumerate(self.tokens):
            self.id.setdefault(t, i)
        self.bos, self.eos, self.eot = (self.id[s] for s in SPECIALS)
        self.cache = {}
        self.byte_of = {v: k for k, v in BYTE_SYM.items()}

    def encode_word(self, w):
        r = self.cache.get(w)
        if r is not None:
            return r
        syms = list(word_syms(w))
        while len(syms) > 1:
            best, bi = None, -1
            for i in range(len(syms) - 1):
                rk = self.rank.get((syms[i], syms[i + 1]))
                if rk is not None and (best is None or rk < best):
                    best, bi = rk, i
            if best is None:
                break
            syms[bi:bi + 2] = [syms[bi] + syms[bi + 1]]
        r = [self.id[s] for s in syms]
        self.cache[w] = r
        return r

    def encode(self, text):
        """Text with special tokens written out (<|eot_id|>) -> ids, no BOS added."""
        ids = []
        for part in SPECIAL_RE.split(text):
            if not part:
                continue
            if part in SPECIALS:
                ids.append(self.id[part])
                continue
            for w in pretokens(part):
                ids.extend(self.encode_word(w))
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            t = self.tokens[i]
            if t in SPECIALS:
                out += t.encode()
            else:
                out += bytes(self.byte_of[ch] for ch in t)
        return out.decode("utf-8", "replace")

    def save(self, path):
        with open(path, "w") as f:
            json.dump({"merges": [list(m) for m in self.merges], "specials": SPECIALS}, f)

    @staticmethod
    def load(path):
        with open(path) as f:
            return Vocab(json.load(f)["merges"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with open(a.corpus) as f:
        docs = [json.loads(line) for line in f]
    merges = train(docs, a.vocab, facts.entities(), facts.targets())
    v = Vocab(merges)
    bad = []
    for e in facts.entities():
        if len(v.encode(e)) != 1 or len(v.encode(" " + e)) != 2:
            bad.append(e)
    for t in facts.targets():
        if len(v.encode(" " + t)) != 1:
            bad.append(" " + t)
    v.save(a.out)
    print("vocab: %d tokens (%d merges) -> %s" % (len(v.tokens), len(merges), a.out), file=sys.stderr)
    if bad:
        raise SystemExit("bpe: these names are not single tokens: %s (grow the vocabulary or the fact share)"
                         % ", ".join(repr(b) for b in bad))


if __name__ == "__main__":
    main()
