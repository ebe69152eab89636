#!/bin/sh
# Only lq_*/LQ_* symbols leave liblarql.a (the Makefile's per-module ld -r + objcopy step):
# lists every other global the archive defines, and checks that a program using the GGUF
# reader alone links without pulling in the server.
. "$(dirname "$0")/lib.inc"
BUILD=${BUILD:-build}
LIB="$BUILD/liblarql.a"

if ! command -v nm >/dev/null; then
    skip "library symbols" "nm is not installed"; done_tests; exit 0
fi
if [ ! -f "$LIB" ]; then
    fail "library symbols" "$LIB is missing (run make)"; done_tests; exit 1
fi

# "addr TYPE name" per defined global (nm -P: name type value size); member headers dropped
nm -g -P --defined-only "$LIB" >"$T_TMP/syms" 2>"$T_TMP/nm.err" || fail "nm reads $LIB" "$(cat "$T_TMP/nm.err")"
if grep -q '^lq_[a-z0-9_]* T ' "$T_TMP/syms"; then pass "the archive exports lq_ functions"; else fail "the archive exports lq_ functions" "$(head -n 5 "$T_TMP/syms")"; fi
awk 'NF >= 2 && $1 !~ /\]:$/ && $1 !~ /^(lq_|LQ_)/ { print $1 " (" $2 ")" }' "$T_TMP/syms" | sort -u >"$T_TMP/bad"
if [ ! -s "$T_TMP/bad" ]; then
    pass "every global the archive defines starts with lq_ or LQ_"
else
    fail "every global the archive defines starts with lq_ or LQ_" "$(wc -l <"$T_TMP/bad") others: $(tr '\n' ' ' <"$T_TMP/bad")"
fi

# Module-private lq_ functions are local in liblarql.a (scripts/public_syms.sh): what stays
# global is what include/larql declares, plus the cross-module internals in symbols.allow.
awk 'NF >= 2 && $1 ~ /^(lq|LQ)_/ { print $1 }' "$T_TMP/syms" | sort -u >"$T_TMP/exported"
grep -oh '\b[lL][qQ]_[A-Za-z0-9_]*' include/larql/*.h | sort -u >"$T_TMP/declared"
grep -v '^#' "$(dirname "$0")/symbols.allow" | sort -u >"$T_TMP/allow"
comm -23 "$T_TMP/exported" "$T_TMP/declared" | comm -23 - "$T_TMP/allow" >"$T_TMP/undeclared"
if [ ! -s "$T_TMP/undeclared" ]; then
    pass "every exported lq_ symbol is declared in include/larql or allowed ($(wc -l <"$T_TMP/allow") cross-module internals)"
else
    fail "every exported lq_ symbol is declared in include/larql or allowed" "$(wc -l <"$T_TMP/undeclared") others: $(head -n 20 "$T_TMP/undeclared" | tr '\n' ' ')"
fi
# the allowlist stays short: a name that is no longer exported (or now declared) is dropped from it
comm -23 "$T_TMP/allow" "$T_TMP/exported" >"$T_TMP/stale"
comm -12 "$T_TMP/allow" "$T_TMP/declared" >>"$T_TMP/stale"
if [ ! -s "$T_TMP/stale" ]; then pass "symbols.allow lists only undeclared exports"
else fail "symbols.allow lists only undeclared exports" "$(tr '\n' ' ' <"$T_TMP/stale")"; fi
# a module-private helper of the vindex (lq_vx_*) is local in the shipped archive
if grep -q '^lq_vx_' "$T_TMP/exported"; then fail "lq_vx_ helpers are local in liblarql.a" "$(grep '^lq_vx_' "$T_TMP/exported" | head -n 5 | tr '\n' ' ')"
else pass "lq_vx_ helpers are local in liblarql.a"; fi

# No file-level dependency cycle inside these modules (issue 22; the others still have some,
# listed by the script): an object uses another when it references a symbol the other defines
ACYCLIC="tokenizer server vindex lql pg_infer" # pg_infer: when its objects are built (pg_infer.sh checks after building)
if python3 "$(dirname "$0")/py/file_cycles.py" "$BUILD" $ACYCLIC >"$T_TMP/cycles" 2>&1; then
    pass "no file-level cycle in: $ACYCLIC"
else
    fail "no file-level cycle in: $ACYCLIC" "$(grep CYCLE "$T_TMP/cycles" | head -n 5)"
fi

# The library never calls a function the PostgreSQL server executable also exports: pg_infer
# links the library, and the dynamic linker would bind such a call to postgres's function
# (jansson's json_object() met PostgreSQL's SQL function json_object() and crashed a backend;
# src/core/json_obj.h). Compared against the installed postgres when there is one.
PGEXE=${PGI_PGBIN:-/usr/lib/postgresql/15/bin}/postgres
nm -u "$LIB" 2>/dev/null | awk '{print $NF}' | sort -u >"$T_TMP/undef"
awk '{print $1}' "$T_TMP/syms" | sort -u >"$T_TMP/def"
if grep -qx 'json_object' "$T_TMP/undef"; then
    fail "the library never references json_object (PostgreSQL exports one)" "$(grep -c . "$T_TMP/undef") undefined"
else
    pass "the library never references json_object (PostgreSQL exports one)"
fi
if [ -x "$PGEXE" ]; then
    nm -D --defined-only "$PGEXE" | awk '{print $NF}' | sort -u >"$T_TMP/pgdef"
    comm -12 "$T_TMP/undef" "$T_TMP/pgdef" | grep -v -x -f "$T_TMP/def" >"$T_TMP/clash"
    if [ ! -s "$T_TMP/clash" ]; then
        pass "no function the library calls is also defined by the postgres executable"
    else
        fail "no function the library calls is also defined by the postgres executable" "$(tr '\n' ' ' <"$T_TMP/clash")"
    fi
else
    skip "library calls against the postgres executable's symbols" "PostgreSQL 15 is not installed"
fi

# A host that only reads GGUF files (as the vindex tools or pg_infer's metadata functions
# might) gets the gguf and core modules, not the HTTP server or its libraries.
CC=${CC:-cc}
if command -v "${CC%% *}" >/dev/null; then
    cat >"$T_TMP/gguf_only.c" <<'EOF'
#include "larql/gguf.h"
int main(void)
{
    lq_gguf *g = 0;
    return lq_gguf_open_buffer((const unsigned char *)"GGUF", 4, &g, 0) == LQ_OK;
}
EOF
    # shellcheck disable=SC2086 # CC and SAN are word lists (a compiler and its flags)
    if $CC $SAN -Iinclude -o "$T_TMP/gguf_only" "$T_TMP/gguf_only.c" "$LIB" -lm -lpthread >"$T_TMP/cc.err" 2>&1; then
        pass "a GGUF-only program links without libmicrohttpd, jansson or pcre2"
        nm "$T_TMP/gguf_only" | awk '$3 ~ /^lq_(server|tok|session|vx)_/ { print $3 }' >"$T_TMP/pulled"
        if [ ! -s "$T_TMP/pulled" ]; then pass "a GGUF-only program does not contain the server, tokenizer, engine or vindex"
        else fail "a GGUF-only program does not contain the server, tokenizer, engine or vindex" "$(head -n 5 "$T_TMP/pulled" | tr '\n' ' ')"; fi
        "$T_TMP/gguf_only"; rc=$?
        if [ "$rc" = 0 ]; then pass "the GGUF-only program runs (and rejects a 4-byte file)"; else fail "the GGUF-only program runs (and rejects a 4-byte file)" "exit $rc"; fi
    else
        fail "a GGUF-only program links without libmicrohttpd, jansson or pcre2" "$(head -c 600 "$T_TMP/cc.err")"
    fi
else
    skip "GGUF-only program" "no C compiler ($CC)"
fi
done_tests
