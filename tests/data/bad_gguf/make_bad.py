#!/usr/bin/env python3
"""Writes the malformed GGUF corpus next to this script and its EXPECTED file.

usage: python3 tests/data/bad_gguf/make_bad.py      (stdlib only; output is deterministic)

Each sample is a small valid GGUF with one defect. EXPECTED lists, one per line,
"<file> <status> <substring>": the status larql must return (EFORMAT, EUNSUPPORTED) and a
substring its error message must contain. tests/unit/test_gguf_bad.c reads both.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
F32T, Q8_0, I2_S = 0, 8, 36


def u32(v):
    return struct.pack('<I', v)


def u64(v):
    return struct.pack('<Q', v)


def s(b):
    if isinstance(b, str):
        b = b.encode()
    return u64(len(b)) + b


def kv(key, vtype, payload):
    return s(key) + u32(vtype) + payload


def tinfo(name, dims, ttype, off):
    return s(name) + u32(len(dims)) + b''.join(u64(d) for d in dims) + u32(ttype) + u64(off)


def gguf(kvs=(), tensors=(), data=b'', version=3, n_kv=None, n_t=None, align=32, pad=True):
    head = b'GGUF' + u32(version) + u64(len(tensors) if n_t is None else n_t) + \
        u64(len(kvs) if n_kv is None else n_kv) + b''.join(kvs) + b''.join(tensors)
    if pad:
        head += b'\0' * (-len(head) % align)
    return head + data


ARCH = kv('general.architecture', STRING, s('test'))
F32_8 = struct.pack('<8f', *range(8))  # 32 bytes: one [8] F32 tensor


def ok_tensor_file(dims, ttype, data, name='w', extra_kvs=()):
    return gguf([ARCH, *extra_kvs], [tinfo(name, dims, ttype, 0)], data)


CASES = []


def case(name, status, substring, blob):
    CASES.append((name, status, substring, blob))


# --- header ---
case('empty.gguf', 'EFORMAT', 'truncated: magic', b'')
case('bad_magic.gguf', 'EFORMAT', 'bad magic 0x58554747', b'GGUX' + gguf()[4:])
case('truncated_header.gguf', 'EFORMAT', 'truncated: n_tensors', b'GGUF' + u32(3) + b'\0\0\0\0')
case('version1.gguf', 'EUNSUPPORTED', 'version 1 is not supported', gguf(version=1))
case('version4.gguf', 'EUNSUPPORTED', 'version 4 is not supported', gguf(version=4))
case('big_endian.gguf', 'EUNSUPPORTED', 'big-endian', b'GGUF' + struct.pack('>I', 3) + u64(0) + u64(0))
case('n_tensors_cap.gguf', 'EFORMAT', 'n_tensors 1099511627776 exceeds cap', gguf([ARCH], n_t=1 << 40))
case('n_tensors_fit.gguf', 'EFORMAT', 'n_tensors 1000 cannot fit', gguf([ARCH], n_t=1000))
case('n_kv_cap.gguf', 'EFORMAT', 'n_kv 18446744073709551615 exceeds cap', gguf([ARCH], n_kv=2**64 - 1))
case('n_kv_fit.gguf', 'EFORMAT', 'n_kv 5000 cannot fit', gguf([ARCH], n_kv=5000))

# --- metadata ---
case('key_len_eof.gguf', 'EFORMAT', 'string length 1000 at offset',
     b'GGUF' + u32(3) + u64(0) + u64(1) + u64(1000) + b'abc' + u32(4) + u32(7) + b'\0' * 8)
case('key_len_cap.gguf', 'EFORMAT', 'string length 70000 exceeds cap 65535',
     gguf([u64(70000) + b'k' * 8 + u32(U32) + u32(1)]))  # cap checked before EOF
case('str_len_cap.gguf', 'EFORMAT', 'string length 33554432 exceeds cap 16777216',
     gguf([kv('a.s', STRING, u64(1 << 25) + b'x' * 8)]))
case('str_len_eof.gguf', 'EFORMAT', "key 'a.s': value: string length 100",
     gguf([kv('a.s', STRING, u64(100) + b'x' * 10)], pad=False))
case('arr_len_cap.gguf', 'EFORMAT', "key 'a.arr': array length 1073741824 exceeds cap 67108864",
     gguf([kv('a.arr', ARRAY, u32(U8) + u64(1 << 30) + b'\0' * 16)]))
case('arr_len_eof.gguf', 'EFORMAT', "key 'a.arr': array length 1000 of u32",
     gguf([kv('a.arr', ARRAY, u32(U32) + u64(1000) + b'\0' * 16)], pad=False))
case('arr_str_eof.gguf', 'EFORMAT', "key 'a.arr' element 2: array string: string length 50",
     gguf([kv('a.arr', ARRAY, u32(STRING) + u64(4) + s('a') + s('b') + u64(50) + b'xy' + u64(0) * 3)],
          pad=False))
case('unknown_vtype.gguf', 'EFORMAT', "key 'a.x': unknown value type 13",
     gguf([kv('a.x', 13, u32(0))]))
case('unknown_arr_type.gguf', 'EFORMAT', "key 'a.arr': unknown array element type 42",
     gguf([kv('a.arr', ARRAY, u32(42) + u64(1) + u32(0))]))
inner = u32(ARRAY) + u64(1) + u32(U8) + u64(1) + b'\x07'  # an array holding an array
case('nested_deep.gguf', 'EUNSUPPORTED', 'nested deeper than one level',
     gguf([kv('a.nest', ARRAY, u32(ARRAY) + u64(1) + inner)]))
case('value_truncated.gguf', 'EFORMAT', "key 'a.u': truncated: value needs 4 bytes",
     b'GGUF' + u32(3) + u64(0) + u64(1) + s('a.u') + u32(U32) + b'\1\0')
case('dup_key.gguf', 'EFORMAT', "duplicate key 'a.b'",
     gguf([kv('a.b', U32, u32(1)), ARCH, kv('a.b', U32, u32(2))]))
case('align_not_pow2.gguf', 'EFORMAT', 'general.alignment 48 is not a power of two',
     gguf([kv('general.alignment', U32, u32(48))]))
case('align_zero.gguf', 'EFORMAT', 'general.alignment 0 is not a power of two',
     gguf([kv('general.alignment', U32, u32(0))]))
case('align_string.gguf', 'EFORMAT', "key 'general.alignment' is string, not a number",
     gguf([kv('general.alignment', STRING, s('32'))]))
case('align_float.gguf', 'EFORMAT', 'general.alignment must be an integer, not f32',
     gguf([kv('general.alignment', F32, struct.pack('<f', 32.0))]))
case('key_nul.gguf', 'EFORMAT', 'key 1: contains a NUL byte', gguf([ARCH, kv(b'a\0b', U8, b'\1')]))

# --- tensor infos ---
case('zero_dim.gguf', 'EFORMAT', "tensor 'w': dimension 1 is 0", ok_tensor_file([8, 0], F32T, F32_8))
case('ndims_5.gguf', 'EFORMAT', "tensor 'w': n_dims 5 out of range 1..4",
     ok_tensor_file([8, 1, 1, 1, 1], F32T, F32_8))
case('ndims_0.gguf', 'EFORMAT', "tensor 'w': n_dims 0 out of range 1..4", ok_tensor_file([], F32T, F32_8))
case('dim_overflow.gguf', 'EFORMAT', "tensor 'w': element count overflows uint64",
     ok_tensor_file([1 << 32, 1 << 32, 2], F32T, F32_8))
case('dim_too_big.gguf', 'EFORMAT', "tensor 'w': dimension 0 = 9223372036854775808 exceeds INT64_MAX",
     ok_tensor_file([1 << 63], F32T, F32_8))
case('unknown_ttype.gguf', 'EUNSUPPORTED', "tensor 'w': unknown ggml type 99", ok_tensor_file([8], 99, F32_8))
case('name_cap.gguf', 'EFORMAT', 'string length 300 exceeds cap 256',
     ok_tensor_file([8], F32T, F32_8, name='n' * 300))
case('name_nul.gguf', 'EFORMAT', 'name contains a NUL byte', ok_tensor_file([8], F32T, F32_8, name=b'a\0b'))
case('dup_tensor.gguf', 'EFORMAT', "duplicate tensor name 'w'",
     gguf([ARCH], [tinfo('w', [8], F32T, 0), tinfo('w', [8], F32T, 32)], F32_8 * 2))
case('data_past_eof.gguf', 'EFORMAT', "tensor 'w': data [",
     ok_tensor_file([16], F32T, F32_8))  # needs 64 bytes, has 32
case('offset_past_eof.gguf', 'EFORMAT', "tensor 'w': offset 18446744073709551584 is past end of file",
     gguf([ARCH], [tinfo('w', [8], F32T, 2**64 - 32)], F32_8))
case('misaligned_offset.gguf', 'EFORMAT', "tensor 'w': offset 16 is not a multiple of alignment 32",
     gguf([ARCH], [tinfo('w', [4], F32T, 16)], F32_8))
case('overlap.gguf', 'EFORMAT', 'overlaps tensor',
     gguf([ARCH], [tinfo('a', [16], F32T, 0), tinfo('b', [8], F32T, 32)], F32_8 * 2))
case('row_not_block.gguf', 'EFORMAT', "tensor 'w': Q8_0: row length 48 is not a multiple of the block size 32",
     ok_tensor_file([48, 2], Q8_0, b'\0' * 3 * 34 + b'\0' * 26))
case('i2s_not_128.gguf', 'EFORMAT', "tensor 'w': I2_S: 192 elements is not a multiple of 128",
     ok_tensor_file([64, 3], I2_S, b'\0' * 96))
case('i2s_not_4.gguf', 'EFORMAT', "tensor 'w': I2_S: 6 elements is not a multiple of 128",
     ok_tensor_file([6], I2_S, b'\0' * 64))
case('i2s_scale_eof.gguf', 'EFORMAT', "tensor 'w': I2_S scale at",
     ok_tensor_file([128], I2_S, b'\x55' * 32))  # packed bytes present, scale missing
case('i2s_data_eof.gguf', 'EFORMAT', "tensor 'w': data [",
     ok_tensor_file([256], I2_S, b'\x55' * 32))
case('alignment_pow2_but_bad_offset.gguf', 'EFORMAT', 'offset 32 is not a multiple of alignment 64',
     gguf([kv('general.alignment', U32, u32(64))], [tinfo('a', [8], F32T, 0), tinfo('b', [8], F32T, 32)],
          F32_8 * 4, align=64))


def main():
    for f in os.listdir(HERE):
        if f.endswith('.gguf'):
            os.remove(os.path.join(HERE, f))
    lines = ['# <file> <status> <substring of the error message>  (generated by make_bad.py)']
    for name, status, sub, blob in CASES:
        with open(os.path.join(HERE, name), 'wb') as fh:
            fh.write(blob)
        lines.append('%s %s %s' % (name, status, sub))
    with open(os.path.join(HERE, 'EXPECTED'), 'w') as fh:
        fh.write('\n'.join(lines) + '\n')
    print('%d files written to %s' % (len(CASES), HERE))


if __name__ == '__main__':
    main()
