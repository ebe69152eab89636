#!/usr/bin/env python3
"""Packs a directory (one level of sub-directories) into fuzz_vindex's input format:
records of u8 name length, name, u32 little-endian size, bytes.  pack_dir.py DIR OUT"""
import os
import struct
import sys

src, out = sys.argv[1], sys.argv[2]
recs = []
for base, _dirs, files in sorted(os.walk(src)):
    for f in sorted(files):
        p = os.path.join(base, f)
        name = os.path.relpath(p, src).encode()
        data = open(p, 'rb').read()
        recs.append(bytes([len(name)]) + name + struct.pack('<I', len(data)) + data)
# index.json first: a mutation of the first records reaches the loader's first checks
recs.sort(key=lambda r: r[1:1 + r[0]] != b'index.json')
open(out, 'wb').write(b''.join(recs))
