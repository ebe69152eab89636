#!/bin/sh
# The symbols liblarql.a keeps global (Makefile): every lq_/LQ_ name a public header
# (include/larql/*.h) mentions, and every lq_ name one module's object calls in another
# (the shared internals of core, kernels and model, listed in tests/cli/symbols.allow).
# Everything else a module defines is made local: module-private helpers do not reach a host
# program. usage: public_syms.sh OUT MODULE_OBJECT...
set -e
out=$1
shift
{
    grep -oh '\b[lL][qQ]_[A-Za-z0-9_]*' include/larql/*.h
    nm -u "$@" | awk '{ print $NF }' | grep -E '^(lq|LQ)_' || true
} | sort -u >"$out.tmp"
mv "$out.tmp" "$out"
