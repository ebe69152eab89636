#!/bin/sh
# `make lint`: cppcheck over src/ with the warning class enabled (errors are always on);
# any finding of class error or warning fails. False positives are suppressed inline in the
# source, next to a comment that says why. The one exception below is not a finding about
# code: cppcheck 2.10 cannot expand the route table's macros that build its JSON-schema string
# literals (routes.c; unknownMacro, "configuration required") and skips that file.
# jansson's iteration macros are spelled out for cppcheck in tests/lint/cppcheck.h.
if ! command -v cppcheck >/dev/null 2>&1; then
    echo "cppcheck not installed (Debian package cppcheck)"; exit 1
fi
out=$(cppcheck -q -j2 --enable=warning --std=c11 -D_GNU_SOURCE -D__x86_64__ -Iinclude -Isrc --library=posix \
    --inline-suppr --suppress=unknownMacro:src/server/routes.c \
    --include=tests/lint/cppcheck.h \
    --template='{file}:{line}: {severity}: {message} [{id}]' src/ 2>&1)
findings=$(printf '%s\n' "$out" | grep -E '^src/[^:]*:[0-9]+: (error|warning):' | sort -u)
if [ -n "$findings" ]; then
    printf '%s\n' "$findings"
    echo "cppcheck: $(printf '%s\n' "$findings" | wc -l) finding(s)"
    exit 1
fi
echo "cppcheck: no error or warning findings in src/"
