#!/usr/bin/env python3
"""The same weights as a GGUF and as a Hugging Face folder (stdlib only), for
tests/cli/safetensors.sh.

    hf_twin.py twin FORM IN.gguf HF_DIR REF.gguf [--shards N]
        IN.gguf: a fixture from `larql make-model`. Writes HF_DIR (config.json, tokenizer.json,
        tokenizer_config.json, model.safetensors or N shards + model.safetensors.index.json)
        holding IN's weights in FORM, and REF.gguf: IN with the values the HF dtypes can hold
        (bf16-rounded norms and embedding, the scales the HF form implies), i.e. what the GGUF
        route holds for exactly the weights in HF_DIR. FORM:
          packed   microsoft/bitnet-b1.58-2B-4T: uint8 [out/4, in] + bf16 weight_scale, bf16
                   embedding and norms; REF scale = 1 / weight_scale
          master   its bf16 master weights: ternary * magnitude (plus small values where the
                   trit is 0), quantised by absmean at conversion; REF scale = mean|W|
          f16      a llama-family F16 model (IN made with --arch llama --proj-type f16
                   --emb-type f16): F16 everything, q/k rows in HF's rotate_half order
    hf_twin.py blank HF_DIR VOCAB TOKENIZER.json TOKENIZER_CONFIG.json
        A one-layer llama F16 folder of zero weights with VOCAB rows and the given tokenizer
        files (the real Llama 3 ones in the conformance check).
    hf_twin.py compare REF.gguf OUT.gguf
        Every tensor: same name, type, shape and bytes; every metadata key of REF equal in OUT
        except tokenizer.ggml.scores (unused by byte-level BPE; llama.cpp does not write it);
        OUT may add tokenizer.chat_template only.
    hf_twin.py mutate KIND HF_DIR
        Breaks a folder in place for one bad-input test of tests/cli/safetensors.sh (see mutate())."""
import json
import math
import os
import struct
import sys

GGUF_SCALAR = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<f', 7: '<?', 10: '<Q', 11: '<q',
               12: '<d'}
F32, F16, I2_S = 0, 1, 36


# ---- GGUF (read) ----

class Gguf:
    def __init__(self, path):
        self.path = path
        self.buf = bytearray(open(path, 'rb').read())
        b = self.buf
        assert b[:4] == b'GGUF'
        self.pos = 8
        nt, nkv = struct.unpack_from('<QQ', b, 8)
        self.pos = 24
        self.kv = {}
        for _ in range(nkv):
            k = self.string()
            t = self.u32()
            self.kv[k] = (t, self.value(t))
        self.tensors = []
        for _ in range(nt):
            name = self.string()
            nd = self.u32()
            ne = list(struct.unpack_from('<%dQ' % nd, b, self.pos))
            self.pos += 8 * nd
            typ = self.u32()
            off = struct.unpack_from('<Q', b, self.pos)[0]
            self.pos += 8
            self.tensors.append([name, ne, typ, off])
        align = self.kv.get('general.alignment', (4, 32))[1]
        self.data = (self.pos + align - 1) // align * align

    def u32(self):
        v = struct.unpack_from('<I', self.buf, self.pos)[0]
        self.pos += 4
        return v

    def string(self):
        n = struct.unpack_from('<Q', self.buf, self.pos)[0]
        s = bytes(self.buf[self.pos + 8:self.pos + 8 + n]).decode('utf-8')
        self.pos += 8 + n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et = self.u32()
            n = struct.unpack_from('<Q', self.buf, self.pos)[0]
            self.pos += 8
            return [self.value(et) for _ in range(n)]
        f = GGUF_SCALAR[t]
        v = struct.unpack_from(f, self.buf, self.pos)[0]
        self.pos += struct.calcsize(f)
        return v

    def tensor(self, name):
        for t in self.tensors:
            if t[0] == name:
                return t
        raise KeyError(name)

    def nbytes(self, t):
        n = 1
        for e in t[1]:
            n *= e
        return {F32: n * 4, F16: n * 2, I2_S: n // 4 + 32}[t[2]]

    def raw(self, t):
        o = self.data + t[3]
        return self.buf[o:o + self.nbytes(t)]

    def put(self, t, data):
        o = self.data + t[3]
        assert len(data) <= self.nbytes(t)
        self.buf[o:o + len(data)] = data

    def floats(self, t):
        n = len(self.raw(t)) // (4 if t[2] == F32 else 2)
        return list(struct.unpack('<%d%s' % (n, 'f' if t[2] == F32 else 'e'), self.raw(t)))

    def save(self, path):
        open(path, 'wb').write(self.buf)


# ---- number formats ----

def f32(x):
    return struct.unpack('<f', struct.pack('<f', x))[0]


def bf16_bits(x):
    """f32 -> bf16 bits, round to nearest even (what torch does)."""
    u = struct.unpack('<I', struct.pack('<f', x))[0]
    return ((u + 0x7fff + ((u >> 16) & 1)) >> 16) & 0xffff


def bf16_val(bits):
    return struct.unpack('<f', struct.pack('<I', bits << 16))[0]


def bf16(x):
    return bf16_val(bf16_bits(x))


def pack_bf16(vals):
    return struct.pack('<%dH' % len(vals), *[bf16_bits(v) for v in vals])


# ---- I2_S (microsoft's x86 layout: 128-element blocks of 32 bytes, code = trit + 1) ----

def i2s_trits(raw, n):
    out = [0] * n
    for blk in range(n // 128):
        for j in range(128):
            byte = raw[blk * 32 + j % 32]
            out[blk * 128 + j] = ((byte >> (6 - 2 * (j // 32))) & 3) - 1
    return out


def hf_pack(trits, rows, cols):
    """transformers' pack_weights: bits 2i of packed row r hold output row i*(rows/4)+r."""
    p = rows // 4
    out = bytearray(p * cols)
    for i in range(4):
        for r in range(p):
            src = (i * p + r) * cols
            dst = r * cols
            for c in range(cols):
                out[dst + c] |= (trits[src + c] + 1) << (2 * i)
    return bytes(out)


# ---- safetensors (write) ----

def write_safetensors(path, tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] in order."""
    header, off = {}, 0
    if metadata:
        header['__metadata__'] = metadata
    for name, dt, shape, data in tensors:
        header[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header, separators=(',', ':')).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h)
        for t in tensors:
            f.write(t[3])


def write_folder(d, tensors, shards):
    os.makedirs(d, exist_ok=True)
    if shards <= 1:
        write_safetensors(os.path.join(d, 'model.safetensors'), tensors, {'format': 'pt'})
        return
    per = (len(tensors) + shards - 1) // shards
    wm = {}
    for s in range(shards):
        name = 'model-%05d-of-%05d.safetensors' % (s + 1, shards)
        part = tensors[s * per:(s + 1) * per]
        write_safetensors(os.path.join(d, name), part, {'format': 'pt'})
        for t in part:
            wm[t[0]] = name
    json.dump({'metadata': {'total_size': sum(len(t[3]) for t in tensors)}, 'weight_map': wm},
              open(os.path.join(d, 'model.safetensors.index.json'), 'w'), indent=2)


# ---- the twin ----

LLAMA3_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ m['role'] | capitalize }}: {{ m['content'] }}<|eot_id|>"
                 "{% endfor %}{% if add_generation_prompt %}Assistant: {% endif %}")


def tokenizer_files(g, d):
    toks = g.kv['tokenizer.ggml.tokens'][1]
    types = g.kv['tokenizer.ggml.token_type'][1]
    vocab, added = {}, []
    for i, (t, ty) in enumerate(zip(toks, types)):
        if ty == 3:
            added.append({'id': i, 'content': t, 'single_word': False, 'lstrip': False, 'rstrip': False,
                          'normalized': False, 'special': True})
        else:
            vocab[t] = i
    tj = {'version': '1.0', 'truncation': None, 'padding': None, 'added_tokens': added, 'normalizer': None,
          'pre_tokenizer': {'type': 'Sequence', 'pretokenizers': [
              {'type': 'Split', 'pattern': {'Regex': LLAMA3_SPLIT}, 'behavior': 'Isolated', 'invert': False},
              {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True, 'use_regex': False}]},
          'post_processor': None,
          'decoder': {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': True, 'use_regex': True},
          'model': {'type': 'BPE', 'dropout': None, 'unk_token': None, 'continuing_subword_prefix': None,
                    'end_of_word_suffix': None, 'fuse_unk': False, 'byte_fallback': False, 'ignore_merges': True,
                    'vocab': vocab, 'merges': [m.split(' ', 1) for m in g.kv['tokenizer.ggml.merges'][1]]}}
    json.dump(tj, open(os.path.join(d, 'tokenizer.json'), 'w'), ensure_ascii=False)
    bos = toks[g.kv['tokenizer.ggml.bos_token_id'][1]]
    eos = toks[g.kv['tokenizer.ggml.eos_token_id'][1]]
    json.dump({'bos_token': bos, 'eos_token': eos, 'add_bos_token': True, 'chat_template': CHAT_TEMPLATE,
               'model_max_length': 1000000}, open(os.path.join(d, 'tokenizer_config.json'), 'w'), indent=2)


def config(g, form):
    a = g.kv['general.architecture'][1]
    k = lambda s: g.kv[a + '.' + s][1]
    cfg = {'architectures': ['LlamaForCausalLM' if form == 'f16' else 'BitNetForCausalLM'],
           'model_type': 'llama' if form == 'f16' else 'bitnet',
           'hidden_size': k('embedding_length'), 'intermediate_size': k('feed_forward_length'),
           'num_hidden_layers': k('block_count'), 'num_attention_heads': k('attention.head_count'),
           'num_key_value_heads': k('attention.head_count_kv'),
           'rms_norm_eps': float('%.9g' % k('attention.layer_norm_rms_epsilon')),
           'rope_theta': k('rope.freq_base'), 'vocab_size': g.tensor('token_embd.weight')[1][1],
           'max_position_embeddings': k('context_length'), 'tie_word_embeddings': True,
           'hidden_act': 'silu' if form == 'f16' else ('relu2' if a == 'bitnet-b1.58' else 'silu'),
           'bos_token_id': g.kv['tokenizer.ggml.bos_token_id'][1],
           'eos_token_id': g.kv['tokenizer.ggml.eos_token_id'][1],
           'torch_dtype': 'float16' if form == 'f16' else 'bfloat16'}
    if form == 'packed':
        cfg['quantization_config'] = {'quant_method': 'bitnet', 'linear_class': 'autobitlinear',
                                      'quantization_mode': 'offline'}
    return cfg


HF_PROJ = [('attn_q', 'self_attn.q_proj'), ('attn_k', 'self_attn.k_proj'), ('attn_v', 'self_attn.v_proj'),
           ('attn_output', 'self_attn.o_proj'), ('ffn_gate', 'mlp.gate_proj'), ('ffn_up', 'mlp.up_proj'),
           ('ffn_down', 'mlp.down_proj')]
HF_NORM = [('attn_norm', 'input_layernorm'), ('ffn_norm', 'post_attention_layernorm'),
           ('attn_sub_norm', 'self_attn.attn_sub_norm'), ('ffn_sub_norm', 'mlp.ffn_sub_norm')]


def hf_rows_from_gguf(vals, rows, cols, n_head):
    """Inverse of llama.cpp's q/k permute: GGUF row h*hd + 2j + s is HF row h*hd + s*hd/2 + j."""
    hd = rows // n_head
    out = [None] * rows
    for h in range(n_head):
        for j in range(hd // 2):
            for s in range(2):
                out[h * hd + s * hd // 2 + j] = vals[(h * hd + 2 * j + s) * cols:(h * hd + 2 * j + s + 1) * cols]
    return [v for r in out for v in r]


def master_weights(trits, scale, seed):
    """bf16 W whose absmean quantisation gives `trits`: magnitudes a*{0.75,1,1.25} where the
    trit is +-1, +-0.1a or 0 where it is 0; returns (W, mean|W| as f32)."""
    nnz = sum(1 for t in trits if t) or 1
    a = scale * len(trits) / nnz  # keeps the model's scale near the fixture's
    x = seed
    w = []
    for t in trits:
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        k = (x >> 33) % 4
        if t:
            w.append(bf16(t * a * (0.75, 1.0, 1.25, 1.0)[k]))
        else:
            w.append(bf16(a * (0.1, -0.1, 0.0, 0.0)[k]))
    s = 0.0
    for v in w:
        s += abs(v)
    m = max(s / len(w), 1e-5)
    for v, t in zip(w, trits):
        q = v / m
        assert (t != 0 and abs(q) > 0.5 and (q > 0) == (t > 0)) or (t == 0 and abs(q) < 0.5)
    return w, f32(m)


def twin(form, src, d, ref, shards):
    g = Gguf(src)
    a = g.kv['general.architecture'][1]
    L = g.kv[a + '.block_count'][1]
    H, KV = g.kv[a + '.attention.head_count'][1], g.kv[a + '.attention.head_count_kv'][1]
    bitnet = form in ('packed', 'master')
    out = []

    def floats_as(name, t, hf_dt):
        vals = g.floats(t)
        if hf_dt == 'BF16':
            vals = [bf16(v) for v in vals]
            data = pack_bf16(vals)
        else:  # F16 holds the fixture's F16 values exactly, and F32 norms rounded to F16
            data = struct.pack('<%de' % len(vals), *vals)
            vals = list(struct.unpack('<%de' % len(vals), data))
        # what the GGUF route holds for these values: F32 norms, F16 matrices
        g.put(t, struct.pack('<%d%s' % (len(vals), 'f' if t[2] == F32 else 'e'), *vals))
        shape = [t[1][1], t[1][0]] if len(t[1]) == 2 else [t[1][0]]
        return (name, hf_dt, shape, data)

    fdt = 'F16' if form == 'f16' else 'BF16'
    out.append(floats_as('model.embed_tokens.weight', g.tensor('token_embd.weight'), fdt))
    for l in range(L):
        for gn, hn in HF_NORM:
            try:
                t = g.tensor('blk.%d.%s.weight' % (l, gn))
            except KeyError:
                continue
            out.append(floats_as('model.layers.%d.%s.weight' % (l, hn), t, fdt))
        for gn, hn in HF_PROJ:
            t = g.tensor('blk.%d.%s.weight' % (l, gn))
            cols, rows = t[1]
            name = 'model.layers.%d.%s.weight' % (l, hn)
            if not bitnet:
                vals = g.floats(t)
                if gn in ('attn_q', 'attn_k'):
                    vals = hf_rows_from_gguf(vals, rows, cols, H if gn == 'attn_q' else KV)
                out.append((name, 'F16', [rows, cols], struct.pack('<%de' % len(vals), *vals)))
                continue
            raw = g.raw(t)
            n = rows * cols
            trits = i2s_trits(raw, n)
            scale = struct.unpack_from('<f', raw, n // 4)[0]
            if form == 'packed':
                ws = bf16_bits(f32(1.0 / scale))
                new_scale = f32(1.0 / bf16_val(ws))
                out.append((name, 'U8', [rows // 4, cols], hf_pack(trits, rows, cols)))
                out.append((name + '_scale', 'BF16', [1], struct.pack('<H', ws)))
            else:
                w, new_scale = master_weights(trits, scale, l * 7 + len(out))
                out.append((name, 'BF16', [rows, cols], pack_bf16(w)))
            g.put(t, bytes(raw[:n // 4]) + struct.pack('<f', new_scale))
    out.append(floats_as('model.norm.weight', g.tensor('output_norm.weight'), fdt))
    write_folder(d, out, shards)
    json.dump(config(g, form), open(os.path.join(d, 'config.json'), 'w'), indent=2)
    tokenizer_files(g, d)
    g.save(ref)


def compare(ref, out):
    r, o = Gguf(ref), Gguf(out)
    bad = []
    if [t[0] for t in r.tensors] != [t[0] for t in o.tensors]:
        bad.append('tensor names/order: %s vs %s' % ([t[0] for t in r.tensors], [t[0] for t in o.tensors]))
    for t in r.tensors:
        try:
            u = o.tensor(t[0])
        except KeyError:
            bad.append('%s missing' % t[0])
            continue
        if t[1] != u[1] or t[2] != u[2]:
            bad.append('%s: shape/type %s %d vs %s %d' % (t[0], t[1], t[2], u[1], u[2]))
        elif r.raw(t) != o.raw(u):
            bad.append('%s: data differs' % t[0])
    for k, v in r.kv.items():
        if k != 'tokenizer.ggml.scores' and o.kv.get(k) != v:
            bad.append('metadata %s: %r vs %r' % (k, str(v)[:80], str(o.kv.get(k))[:80]))
    extra = set(o.kv) - set(r.kv) - {'tokenizer.chat_template'}
    if extra:
        bad.append('extra metadata: %s' % sorted(extra))
    for b in bad:
        print(b)
    print('%d tensors compared, %d differences' % (len(r.tensors), len(bad)))
    return 1 if bad else 0


# ---- bad input ----

def st_read(path):
    b = open(path, 'rb').read()
    n = struct.unpack_from('<Q', b)[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def st_write_raw(path, header, data, hl=None):
    h = json.dumps(header).encode()
    open(path, 'wb').write(struct.pack('<Q', len(h) if hl is None else hl) + h + data)


def mutate(kind, d):
    st = os.path.join(d, 'model.safetensors')
    cfgp = os.path.join(d, 'config.json')
    if kind in ('offsets', 'dtype', 'dtype-unknown', 'header-len', 'overlap', 'missing-norm', 'scale-nan',
                'scale-zero', 'code3'):
        h, data = st_read(st)
        names = [k for k in h if k != '__metadata__']
        if kind == 'offsets':  # the last tensor claims bytes past the end
            last = max(names, key=lambda k: h[k]['data_offsets'][1])
            h[last]['data_offsets'][1] += 64
        elif kind == 'dtype':  # BF16 bytes declared as F32: sizes disagree
            k = next(k for k in names if h[k]['dtype'] == 'BF16' or h[k]['dtype'] == 'F16')
            h[k]['dtype'] = 'F32'
        elif kind == 'dtype-unknown':
            h[names[0]]['dtype'] = 'Q4'
        elif kind == 'overlap':  # two tensors of one size swap in a shared range
            a = sorted(names, key=lambda k: h[k]['data_offsets'][0])
            x, y = a[0], a[1]
            sz = h[y]['data_offsets'][1] - h[y]['data_offsets'][0]
            h[y]['data_offsets'] = [h[x]['data_offsets'][0], h[x]['data_offsets'][0] + sz]
        elif kind == 'missing-norm':
            k = 'model.layers.0.post_attention_layernorm.weight'
            b, e = h.pop(k)['data_offsets']
            data = data[:b] + data[e:]
            for n in h:
                if n != '__metadata__' and h[n]['data_offsets'][0] >= e:
                    h[n]['data_offsets'] = [o - (e - b) for o in h[n]['data_offsets']]
        elif kind in ('scale-nan', 'scale-zero'):
            k = 'model.layers.0.mlp.up_proj.weight_scale'
            b = h[k]['data_offsets'][0]
            data = data[:b] + (b'\xc0\x7f' if kind == 'scale-nan' else b'\x00\x00') + data[b + 2:]
        elif kind == 'code3':
            k = 'model.layers.1.self_attn.v_proj.weight'
            b = h[k]['data_offsets'][0]
            data = data[:b] + b'\xff' + data[b + 1:]
        st_write_raw(st, h, data, hl=(1 << 40) if kind == 'header-len' else None)
    elif kind == 'extra-tensor':  # a weight the converter does not know must not be dropped silently
        h, data = st_read(st)
        h['model.layers.0.mlp.gate_proj.bias'] = {'dtype': 'F32', 'shape': [2], 'data_offsets': [len(data), len(data) + 8]}
        st_write_raw(st, h, data + bytes(8))
    elif kind == 'untied':
        c = json.load(open(cfgp))
        c['tie_word_embeddings'] = False
        json.dump(c, open(cfgp, 'w'))
    elif kind == 'rope-scaling':
        c = json.load(open(cfgp))
        c['rope_scaling'] = {'rope_type': 'llama3', 'factor': 8.0}
        json.dump(c, open(cfgp, 'w'))
    elif kind == 'arch':
        c = json.load(open(cfgp))
        c['architectures'] = ['GPT2LMHeadModel']
        json.dump(c, open(cfgp, 'w'))
    elif kind == 'shard-missing':
        os.remove(os.path.join(d, sorted(f for f in os.listdir(d) if f.startswith('model-'))[-1]))
    elif kind == 'shard-unlisted':
        ix = json.load(open(os.path.join(d, 'model.safetensors.index.json')))
        last = sorted(set(ix['weight_map'].values()))[-1]
        ix['weight_map'] = {k: v for k, v in ix['weight_map'].items() if v != last}
        json.dump(ix, open(os.path.join(d, 'model.safetensors.index.json'), 'w'))
    elif kind == 'config-hidden':
        c = json.load(open(cfgp))
        c['hidden_size'] *= 2
        json.dump(c, open(cfgp, 'w'))
    elif kind == 'config-vocab':
        c = json.load(open(cfgp))
        c['vocab_size'] += 1
        json.dump(c, open(cfgp, 'w'))
    else:
        raise SystemExit('unknown mutation ' + kind)


def blank(d, vocab, tok, tok_cfg):
    D, F = 128, 128
    ts = [('model.embed_tokens.weight', 'F16', [vocab, D], bytes(vocab * D * 2)),
          ('model.norm.weight', 'F16', [D], struct.pack('<e', 1.0) * D)]
    p = 'model.layers.0.'
    ts += [(p + n + '.weight', 'F16', [D], struct.pack('<e', 1.0) * D)
           for n in ('input_layernorm', 'post_attention_layernorm')]
    ts += [(p + n + '.weight', 'F16', [r, c], bytes(r * c * 2))
           for n, r, c in (('self_attn.q_proj', D, D), ('self_attn.k_proj', D, D), ('self_attn.v_proj', D, D),
                           ('self_attn.o_proj', D, D), ('mlp.gate_proj', F, D), ('mlp.up_proj', F, D),
                           ('mlp.down_proj', D, F))]
    write_folder(d, ts, 1)
    json.dump({'architectures': ['LlamaForCausalLM'], 'hidden_size': D, 'intermediate_size': F,
               'num_hidden_layers': 1, 'num_attention_heads': 1, 'vocab_size': vocab, 'rms_norm_eps': 1e-5,
               'rope_theta': 500000.0, 'tie_word_embeddings': True, 'hidden_act': 'silu'},
              open(os.path.join(d, 'config.json'), 'w'))
    open(os.path.join(d, 'tokenizer.json'), 'wb').write(open(tok, 'rb').read())
    open(os.path.join(d, 'tokenizer_config.json'), 'wb').write(open(tok_cfg, 'rb').read())


def main(argv):
    if len(argv) == 6 and argv[1] == 'blank':
        blank(argv[2], int(argv[3]), argv[4], argv[5])
        return 0
    if len(argv) >= 6 and argv[1] == 'twin':
        shards = int(argv[7]) if len(argv) > 7 and argv[6] == '--shards' else 1
        twin(argv[2], argv[3], argv[4], argv[5], shards)
        return 0
    if len(argv) == 4 and argv[1] == 'compare':
        return compare(argv[2], argv[3])
    if len(argv) == 4 and argv[1] == 'mutate':
        mutate(argv[2], argv[3])
        return 0
    print(__doc__)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
