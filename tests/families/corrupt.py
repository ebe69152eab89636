#!/usr/bin/env python3
"""Writes a damaged copy of a GGUF for the bad-input tests (stdlib only):

  corrupt.py IN OUT rename OLD NEW     a tensor's name changed (same length: a tensor missing)
  corrupt.py IN OUT shape NAME DIM N   ne[DIM] of a tensor's info set to N (a wrong shape)
  corrupt.py IN OUT scale NAME nan|0   an I2_S tensor's f32 scale (at byte n/4) overwritten,
                                       or the f16 d of a TQ1_0/TQ2_0 tensor's block 1
  corrupt.py IN OUT truncate NAME      the file cut 64 bytes into the last quarter of an I2_S
                                       tensor's packed bytes (the tensor that ends the file:
                                       its bytes and its scale no longer all there)
"""
import struct
import sys

src, dst, op = sys.argv[1], sys.argv[2], sys.argv[3]
d = bytearray(open(src, "rb").read())
o = 4 + 4
n_t, n_kv = struct.unpack_from("<QQ", d, o)
o += 16


def skip_value(o, t):
    size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    if t in size:
        return o + size[t]
    if t == 8:
        return o + 8 + struct.unpack_from("<Q", d, o)[0]
    et, n = struct.unpack_from("<IQ", d, o)
    o += 12
    for _ in range(n):
        o = skip_value(o, et)
    return o


align = 32
for _ in range(n_kv):
    kl = struct.unpack_from("<Q", d, o)[0]
    key = d[o + 8:o + 8 + kl].decode()
    o += 8 + kl
    t = struct.unpack_from("<I", d, o)[0]
    if key == "general.alignment":
        align = struct.unpack_from("<I", d, o + 4)[0]
    o = skip_value(o + 4, t)
infos = {}
for _ in range(n_t):
    nl = struct.unpack_from("<Q", d, o)[0]
    name = d[o + 8:o + 8 + nl].decode()
    name_at = o + 8
    o += 8 + nl
    nd = struct.unpack_from("<I", d, o)[0]
    dims_at = o + 4
    ne = struct.unpack_from("<%dQ" % nd, d, dims_at)
    o = dims_at + 8 * nd
    typ, off = struct.unpack_from("<IQ", d, o)
    o += 12
    infos[name] = (name_at, dims_at, ne, typ, off)
base = (o + align - 1) // align * align

if op == "rename":
    old, new = sys.argv[4].encode(), sys.argv[5].encode()
    assert len(old) == len(new)
    at = infos[sys.argv[4]][0]
    d[at:at + len(old)] = new
elif op == "shape":
    name, dim, n = sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
    struct.pack_into("<Q", d, infos[name][1] + 8 * dim, n)
elif op == "scale":
    name, v = sys.argv[4], float(sys.argv[5])
    _, _, ne, typ, off = infos[name]
    if typ in (34, 35):  # TQ1_0 (54-byte blocks) / TQ2_0 (66): d is the block's last 2 bytes
        size = 54 if typ == 34 else 66
        struct.pack_into("<e", d, base + off + 2 * size - 2, v)
        open(dst, "wb").write(d)
        sys.exit(0)
    assert typ == 36
    n = 1
    for x in ne:
        n *= x
    struct.pack_into("<f", d, base + off + n // 4, v)
elif op == "truncate":
    name = sys.argv[4]
    _, _, ne, typ, off = infos[name]
    assert typ == 36
    assert off == max(v[4] for v in infos.values()), "truncate: %s is not the file's last tensor" % name
    n = 1
    for x in ne:
        n *= x
    del d[base + off + n // 4 - n // 16 + 64:]
else:
    sys.exit("unknown operation " + op)
open(dst, "wb").write(d)
