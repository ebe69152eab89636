#!/bin/sh
# Makes malformed copies of a good vindex: make_bad.sh GOOD_DIR OUT_DIR
# One sub-directory per case; EXPECTED (next to this script) lists "case|stderr pattern".
# Generated at test time from a freshly built fixture vindex, so nothing binary is committed.
set -e
good=$1; out=$2
mkdir -p "$out"
mk() { rm -rf "$out/$1"; cp -r "$good" "$out/$1"; }
edit_index() { # case python-expression-on-d
    python3 - "$out/$1/index.json" "$2" <<'PY'
import json, sys
p, expr = sys.argv[1], sys.argv[2]
d = json.load(open(p))
exec(expr)
json.dump(d, open(p, "w"), indent=2)
PY
}
truncate_file() { python3 -c "import sys; p=sys.argv[1]; b=open(p,'rb').read(); open(p,'wb').write(b[:int(sys.argv[2])])" "$1" "$2"; }

mk missing_index; rm "$out/missing_index/index.json"
mk bad_json; printf '{"version": 2, "num_layers": ' > "$out/bad_json/index.json"
mk not_object; printf '[1, 2, 3]' > "$out/not_object/index.json"
mk unknown_dtype; edit_index unknown_dtype 'd["dtype"] = "bf8"'
mk missing_field; edit_index missing_field 'del d["hidden_size"]'
mk negative_layers; edit_index negative_layers 'd["num_layers"] = -3'
mk layer_out_of_range; edit_index layer_out_of_range 'd["layers"][0]["layer"] = 99'
mk length_mismatch; edit_index length_mismatch 'd["layers"][0]["length"] += 4'
mk offset_past_end; edit_index offset_past_end 'd["layers"][-1]["offset"] = 1 << 40'
mk duplicate_layer; edit_index duplicate_layer 'd["layers"][1]["layer"] = d["layers"][0]["layer"]'
mk missing_layer; edit_index missing_layer 'del d["layers"][1]'
mk bad_bands; edit_index bad_bands 'd["layer_bands"] = {"syntax": [0, 1], "knowledge": [2, 99], "output": [3, 3]}'
mk vocab_mismatch; edit_index vocab_mismatch 'd["vocab_size"] += 1'
mk truncated_gate; truncate_file "$out/truncated_gate/gate_vectors.bin" 1000
mk missing_gate; rm "$out/missing_gate/gate_vectors.bin"
mk truncated_embeddings; truncate_file "$out/truncated_embeddings/embeddings.bin" 100
mk missing_down_meta; rm "$out/missing_down_meta/down_meta.bin"
mk truncated_down_meta; truncate_file "$out/truncated_down_meta/down_meta.bin" 100
mk short_down_meta; truncate_file "$out/short_down_meta/down_meta.bin" 7
mk bad_magic; python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[0:4]=b'XXXX'; open(p,'wb').write(b)" "$out/bad_magic/down_meta.bin"
mk bad_topk; python3 -c "import sys,struct; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[12:16]=struct.pack('<I',1<<20); open(p,'wb').write(b)" "$out/bad_topk/down_meta.bin"
mk missing_tokenizer; rm "$out/missing_tokenizer/tokenizer.json"
mk bad_tokenizer; printf '{"model": 3}' > "$out/bad_tokenizer/tokenizer.json"
mk bad_labels; printf '{"L0_F1": ' > "$out/bad_labels/feature_labels.json"
