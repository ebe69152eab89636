#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets that take text or small binary inputs
(tests/fuzz/corpus/<target>/), so the committed seeds can be regenerated and reviewed:
    python3 tests/fuzz/make_seeds.py [LARQL]
With LARQL (the built command) it also makes the fixture-based seeds: fuzz_tokenizer's
tokenizer.json and GGUF sources and fuzz_vindex's packed browse and inference vindexes."""
import base64
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


# ---- chat: template NUL role NUL content ... ----
def chat(flags, tmpl, *msgs):
    return bytes([flags]) + tmpl.encode() + b'\0' + b'\0'.join(m.encode() for m in msgs)


put('fuzz_chat', 'plain', chat(0, '', 'user', 'Hello there'))
put('fuzz_chat', 'llama3', chat(2 | 8, '{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>',
                                 'system', 'Be brief.', 'user', 'What is 2+2?', 'assistant', '4', 'user', 'And 3+3?'))
put('fuzz_chat', 'bitnet', chat(4, "{{ 'Assistant: ' }}<|eot_id|>", 'user', 'Bonjour \u00e9t\u00e9', 'tool', 'x'))

# ---- jinja: template NUL variables (JSON); the templates are chat-template test data ----
TPL = os.path.join(HERE, '..', 'data', 'chat_templates')
VARS = json.dumps({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                {"role": "assistant", "content": " Hello "}, {"role": "user", "content": "2+2?"}],
                   "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": True})
for name in ['chatml', 'meta-llama-Llama-3.1-8B-Instruct', 'tiiuae-Falcon3-Instruct', 'llamacpp-25-Mistral-Large-Instruct-2407-mistralai-v3-template-modified-t',
             'llamacpp-31-yandex-YandexGPT-5-Lite-8B-instruct', 'Qwen-Qwen2.5-7B-Instruct', 'bitnet-b1.58-2B-4T']:
    with open(os.path.join(TPL, name + '.jinja'), 'rb') as f:
        put('fuzz_jinja', name.split('-')[0] + '-' + str(len(name)), f.read() + b'\0' + VARS.encode())
put('fuzz_jinja', 'constructs', "{% set ns = namespace(a=0) %}{% for k, v in {'x': [1, 2.5, none]}.items() if k %}"
    "{%- set ns.a = ns.a + 1 -%}{{ k ~ v | tojson(indent=1) }}{{ loop.index }}{% else %}e{% endfor %}"
    "{% macro m(a, b='d') %}{{ a[::-1] | upper }}{{ b | default('x') | trim }}{% endmacro %}{{ m('ab') }}"
    "{{ 'a,b'.split(',') | join('|') }}{% raw %}{{{% endraw %}{{ 7 // 2 ** 2 if true else 0 }}")
put('fuzz_jinja', 'errors', "{{ raise_exception('no') if messages | length > 9 }}{{ u.x }}\0{\"messages\": []}")

# ---- lql: one statement of each form ----
LQL = [
    'USE "a/b.vindex";',
    "DESCRIBE 'France' VERBOSE KNOWLEDGE RELATIONS ONLY AT LAYER 3 SYNTAX;",
    'WALK "The capital" LAYERS 2-5 TOP 7 MODE PURE COMPARE',
    'INFER "p" COMPARE TOP 3;',
    'EXPLAIN INFER "p" KNOWLEDGE WITH ATTENTION RELATIONS ONLY',
    'SELECT entity, target FROM EDGES WHERE entity LIKE "%par%" AND layer = 3 AND score >= 0.5 LIMIT 5',
    'SELECT * FROM EDGES NEAREST TO "France" AT LAYER 26 LIMIT 5',
    "SELECT * FROM FEATURES WHERE layer IN (1, 2, 3) AND token != 'x'",
    'SHOW RELATIONS WITH EXAMPLES VERBOSE; SHOW LAYERS RANGE 0-3; SHOW FEATURES 3 WHERE token = "x" LIMIT 4;',
    'BEGIN PATCH "p.vlp"; INSERT INTO EDGES (entity, relation, target) VALUES ("Atlantis", "capital", "Poseidonia") '
    'AT LAYER 2 CONFIDENCE 0.9; SAVE PATCH; APPLY PATCH \'p.vlp\'; REMOVE PATCH "p.vlp"',
    'DELETE FROM EDGES WHERE entity = "Atlantis" AND layer = 2; '
    'UPDATE EDGES SET target = "x", confidence = 0.5 WHERE layer = 1 AND feature = 7',
    'STATS |> SHOW LAYERS; -- comment\nCOMPILE CURRENT INTO VINDEX "out" ON CONFLICT LAST_WINS',    'TRACE "The capital" FOR "Paris" DECOMPOSE LAYERS 1-2 POSITIONS ALL SAVE "t.json"',
    'DIFF "a.vindex" CURRENT LAYER 2 RELATION "capital" ENTITY "x" LIMIT 5 INTO PATCH "d.vlp"; DESCRIBE "e" |> DIFF WITH "b"',
    'MERGE "p.vlp" INTO "a.vindex" ON CONFLICT HIGHEST_CONFIDENCE; REBALANCE UNTIL CONVERGED MAX 4 FLOOR = 0.3 CEILING 0.9',
    'EXTRACT MODEL "m.gguf" INTO "o" COMPONENTS FFN_GATE, attn_ov LAYERS 0-3 WITH ALL; USE MODEL "m.gguf" AUTO_EXTRACT',
    'COMPACT MAJOR FULL WITH LAMBDA = 0.5; SHOW COMPACT STATUS; COMPILE "a" INTO MODEL "o.gguf" FORMAT GGUF',
    'INFER "p" ROUTE VERIFY FALLBACK TOPK 8 EXIT TOP 3; SELECT entity, * FROM EDGES WHERE relation IN () AND layer >= 2',
]
for i, s in enumerate(LQL):
    put('fuzz_lql', 'stmt%02d.lql' % i, s)

# ---- patch: every op kind, at the fixture width (hidden 128) ----
def vec(seed, n=128):
    return base64.b64encode(struct.pack('<%df' % n, *[((seed * 31 + i * 7) % 17 - 8) / 8.0 for i in range(n)])).decode()


patch = {
    'version': 1, 'base_model': 'larql-fixture', 'base_checksum': None, 'created_at': '2026-01-01T00:00:00Z',
    'description': 'seed', 'author': 'fuzz', 'tags': ['a', 'b'],
    'operations': [
        {'op': 'insert', 'layer': 1, 'feature': 3, 'entity': 'France', 'target': 'Paris', 'relation': 'capital',
         'confidence': 0.9, 'gate_vector_b64': vec(1), 'up_vector_b64': vec(2), 'down_vector_b64': vec(3),
         'down_meta': {'t': 'Paris', 'i': 42, 'c': 0.5}},
        {'op': 'update', 'layer': 0, 'feature': 5, 'gate_vector_b64': vec(4)},
        {'op': 'delete', 'layer': 1, 'feature': 17, 'reason': 'test'},
        {'op': 'insert_knn', 'layer': 1, 'entity': 'the', 'relation': 'is', 'target': 'model', 'target_id': 7,
         'confidence': 1.0, 'key_vector_b64': vec(5)},
        {'op': 'delete_knn', 'entity': 'the'},
    ],
}
put('fuzz_patch', 'all_ops.vlp', json.dumps(patch, indent=1))
put('fuzz_patch', 'delete.vlp', '{"description":"p1","operations":[{"op":"delete","layer":1,"feature":17}]}')

# ---- http: route index, header flags, request ----
ROUTES = ['/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/v1/infer', '/v1/select', '/v1/embed',
          '/v1/logits', '/v1/explain-infer', '/v1/insert', '/v1/patches/apply', '/v1/describe', '/v1/walk',
          '/v1/relations', '/v1/token/encode', '/v1/token/decode', '/v1/patches', '/v1/models', '/v1/stats',
          '/v1/embed/', 'DELETE /v1/patches/', '/assets/', '/', '/v1/walk-ffn']
HTTP = {
    '/v1/chat/completions': {'model': 'larql-fixture', 'messages': [{'role': 'system', 'content': 'Be brief.'},
                                                        {'role': 'user', 'content': 'Hi'}],
                             'max_tokens': 4, 'stream': True, 'temperature': 0.7, 'top_p': 0.9, 'seed': 3,
                             'stop': ['\n'], 'logprobs': True, 'top_logprobs': 2,
                             'stream_options': {'include_usage': True}},
    '/v1/completions': {'prompt': 'The capital of France is', 'max_tokens': 3, 'logprobs': 2, 'echo': True,
                        'temperature': 0, 'n': 1, 'presence_penalty': 0.5},
    '/v1/embeddings': {'input': ['hello', 'world'], 'model': 'larql-fixture'},
    '/v1/infer': {'prompt': 'The capital of France is', 'top': 3, 'mode': 'compare'},
    '/v1/select': {'entity': 'the', 'limit': 3, 'min_confidence': 0.1, 'layer': 1},
    '/v1/embed': {'token_ids': [1, 2, 3]},
    '/v1/logits': {'residual': [0.01 * (i % 7 - 3) for i in range(128)], 'top_k': 3},
    '/v1/explain-infer': {'prompt': 'the model', 'top': 2, 'band': 'all'},
    '/v1/insert': {'entity': 'Atlantis', 'relation': 'capital', 'target': 'the', 'layer': 1, 'confidence': 0.9},
    '/v1/patches/apply': {'patch': patch},
    '/v1/describe': 'entity=the&band=all&limit=5&min_score=0.1&verbose=true',
    '/v1/walk': 'prompt=the+model&top=3&layers=0-1',
    '/v1/relations': 'top=3',
    '/v1/token/encode': 'text=hello+world',
    '/v1/token/decode': 'ids=1,2,3',
    '/v1/patches': '',
    '/v1/models': '',
    '/v1/stats': '',
    '/v1/embed/': '42',
    'DELETE /v1/patches/': 'seed',
    '/assets/': 'app.js',
    '/': '',
    '/v1/walk-ffn': {'layers': [0, 1], 'residual': [0.01 * (i % 7 - 3) for i in range(256)], 'seq_len': 2,
                     'full_output': True},
}
for i, r in enumerate(ROUTES):
    body = HTTP[r]
    if not isinstance(body, str):
        body = json.dumps(body)
    name = r.strip('/').replace('/', '_').replace(' ', '_').replace('-', '_') or 'web_index'
    put('fuzz_http', '%02d_%s' % (i, name), bytes([i, 1 | (2 if r == '/v1/insert' else 0)]) + body.encode())
# walk-ffn's binary wire (flag bit 2: a binary Content-Type): a batch of both layers, 2 rows
put('fuzz_http', '%02d_v1_walk_ffn_binary' % ROUTES.index('/v1/walk-ffn'),
    bytes([ROUTES.index('/v1/walk-ffn'), 1 | 4]) + struct.pack('<5I', 0xFFFFFFFF, 2, 0, 1, 2) +
    struct.pack('<2I', 1, 8092) + struct.pack('<256f', *[0.01 * (i % 5 - 2) for i in range(256)]))
put('fuzz_http', 'noauth_chat', bytes([0, 0]) + json.dumps(HTTP['/v1/chat/completions']).encode())


# ---- ws: masked client frames carrying each message type ----
def frame(payload, op=1, fin=True, mask=b'\x11\x22\x33\x44'):
    if isinstance(payload, str):
        payload = payload.encode()
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | op])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack('>H', n)
    else:
        head += bytes([0x80 | 127]) + struct.pack('>Q', n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


WS = {
    'describe': frame(json.dumps({'type': 'describe', 'entity': 'the', 'band': 'all', 'limit': 5})),
    'infer': frame(json.dumps({'type': 'infer', 'prompt': 'the model', 'top': 3, 'mode': 'compare'})),
    'generate': frame(json.dumps({'type': 'generate', 'prompt': 'Once upon', 'max_tokens': 4, 'temperature': 0})),
    'generate_cancel': frame(json.dumps({'type': 'generate', 'prompt': 'Once', 'max_tokens': 30}))
    + frame(json.dumps({'type': 'cancel'})),
    'fragmented_ping_close': frame('{"type":"desc', fin=False) + frame(b'hi', op=9) + frame('ribe","entity":"x"}', op=0)
    + frame(struct.pack('>H', 1000) + b'bye', op=8),
    'binary_bad_json': frame(b'\x00\x01\x02', op=2) + frame('{not json') + frame('[1,2]'),
}
for k, v in WS.items():
    put('fuzz_ws', k, bytes([1]) + v)
put('fuzz_ws', 'split_describe', bytes([0]) + WS['describe'])


# ---- safetensors: small headers by hand (one file each) ----
def st(header, data=b''):
    h = json.dumps(header).encode()
    return struct.pack('<Q', len(h)) + h + data


put('fuzz_safetensors', 'empty', st({}))
put('fuzz_safetensors', 'two_f32', st({'__metadata__': {'format': 'pt'},
                                       'a': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]},
                                       'b': {'dtype': 'BF16', 'shape': [2, 2], 'data_offsets': [8, 16]}},
                                      struct.pack('<2f', 1.5, -2) + bytes(8)))
put('fuzz_safetensors', 'scalar_zero_size', st({'s': {'dtype': 'F16', 'shape': [], 'data_offsets': [0, 2]},
                                                'z': {'dtype': 'U8', 'shape': [0, 4], 'data_offsets': [2, 2]}},
                                               b'\x00\x3c'))
put('fuzz_safetensors', 'overlap', st({'a': {'dtype': 'U8', 'shape': [4], 'data_offsets': [0, 4]},
                                       'b': {'dtype': 'U8', 'shape': [4], 'data_offsets': [2, 6]}}, bytes(6)))
put('fuzz_safetensors', 'past_end', st({'a': {'dtype': 'I32', 'shape': [4], 'data_offsets': [0, 16]}}, bytes(8)))


# ---- journal: edit journals (src/vindex/journal_frame.h), intact, torn, damaged, old ----
def crc32c(data, crc=0):
    crc ^= 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xffffffff


def jrec(seq, rec):
    p = json.dumps(rec, separators=(',', ':')).encode()
    h = b'LQJ2' + struct.pack('<IQI', len(p), seq, crc32c(p))
    return h + struct.pack('<I', crc32c(h)) + p


def jrec_old(rec):
    import hashlib
    p = json.dumps(rec, separators=(',', ':')).encode()
    return b'LQJ1' + struct.pack('<I', len(p)) + hashlib.sha256(p).digest()[:8] + p


def jpatch(name, layer, feature):
    return {'description': name, 'operations': [{'op': 'delete', 'layer': layer, 'feature': feature}]}


JRECS = [{'t': 'apply', 'name': 'a', 'patch': jpatch('a', 1, 3)},
         {'t': 'edit', 'ops': dict(jpatch('edits', 0, 5), operations=patch['operations'][:2])},
         {'t': 'apply', 'name': 'b', 'patch': jpatch('b', 0, 9)},
         {'t': 'remove', 'name': 'a'}]
good = b''.join(jrec(i + 1, r) for i, r in enumerate(JRECS))
put('fuzz_journal', 'intact.lqj', good)
put('fuzz_journal', 'torn_tail.lqj', good + jrec(5, JRECS[0])[:30])
mid = bytearray(good)
mid[len(jrec(1, JRECS[0])) + 40] ^= 0x10
put('fuzz_journal', 'damaged_middle.lqj', bytes(mid))
put('fuzz_journal', 'sequence_break.lqj', good + jrec(9, {'t': 'remove', 'name': 'b'}))
put('fuzz_journal', 'checkpoint.lqj', jrec(20, {'t': 'checkpoint', 'patches': 1}) +
    jrec(21, {'t': 'apply', 'name': 'b', 'patch': jpatch('b', 0, 9)}) + jrec(22, JRECS[1]))
put('fuzz_journal', 'old_format.lqj', b''.join(jrec_old(r) for r in JRECS[:3]) + b'LQJ1\x05\0\0\0torn')
put('fuzz_journal', 'old_then_new.lqj', b''.join(jrec_old(r) for r in JRECS[:2]) + jrec(3, JRECS[2]))

# ---- fixture-based: tokenizer sources, packed vindexes, safetensors models ----
def tok_seed(mode, src, text):
    return bytes([mode]) + struct.pack('<I', len(src)) + src + text.encode()


if len(sys.argv) > 1:
    larql = sys.argv[1]
    tmp = tempfile.mkdtemp()
    try:
        m = os.path.join(tmp, 'm.gguf')
        run = lambda *a: subprocess.run([larql, *a], check=True, stdout=subprocess.DEVNULL)
        run('make-model', '--out', m, '--preset', 'tiny', '--dim', '128', '--ffn', '128', '--layers', '1',
            '--heads', '2', '--kv-heads', '1', '--vocab', '270', '--ctx', '32', '--emb-type', 'f16')
        run('convert', 'gguf-to-vindex', m, '--output', os.path.join(tmp, 'v'), '--f16')
        run('convert', 'gguf-to-vindex', m, '--output', os.path.join(tmp, 'vi'), '--level', 'inference', '--f16',
            '--keep-quant')
        run('infer', os.path.join(tmp, 'vi'), 'the model', '--knn-insert', 'the:is:model', '--knn-save',
            os.path.join(tmp, 'vi', 'knn_store.bin'))
        tj = open(os.path.join(tmp, 'v', 'tokenizer.json'), 'rb').read()
        put('fuzz_tokenizer', 'json_plain', tok_seed(0, tj, 'The capital of France is Paris.'))
        put('fuzz_tokenizer', 'json_special', tok_seed(6, tj, 'Hi<|eot_id|> \u00e9t\u00e9 \U0001F600 \xff'))
        put('fuzz_tokenizer', 'gguf', tok_seed(7, open(m, 'rb').read(), 'Once upon a time <|eot_id|>'))
        pack = os.path.join(HERE, 'pack_dir.py')
        os.makedirs(os.path.join(HERE, 'corpus', 'fuzz_vindex'), exist_ok=True)
        for name, d in (('browse.vx', 'v'), ('inference.vx', 'vi')):
            subprocess.run([sys.executable, pack, os.path.join(tmp, d),
                            os.path.join(HERE, 'corpus', 'fuzz_vindex', name)], check=True)
        # the three Hugging Face forms of a 1-layer tiny fixture (fuzz_safetensors' config shape)
        twin = os.path.join(HERE, '..', 'safetensors', 'hf_twin.py')
        for form, extra in (('packed', ['--emb-type', 'f16']), ('master', ['--emb-type', 'f16']),
                            ('f16', ['--arch', 'llama', '--proj-type', 'f16', '--emb-type', 'f16'])):
            src = os.path.join(tmp, form + '.gguf')
            run('make-model', '--out', src, '--preset', 'tiny', '--layers', '1', '--ffn', '128', '--heads', '2',
                '--kv-heads', '1', '--vocab', '270', *extra)
            subprocess.run([sys.executable, twin, 'twin', form, src, os.path.join(tmp, form),
                            os.path.join(tmp, form + '.ref.gguf')], check=True)
            put('fuzz_safetensors', 'model_' + form, open(os.path.join(tmp, form, 'model.safetensors'), 'rb').read())
    finally:
        shutil.rmtree(tmp)
