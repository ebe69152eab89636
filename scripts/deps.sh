#!/bin/sh
# Installs the Debian 12 packages larql builds and tests with (as root; skips what is there).
#   --with-node       nodejs and npm, only for the tests that drive the server with the
#                     official openai npm client (a machine that already has node keeps its own)
#   --with-chromium   chromium (Debian's), only for the web page's real-browser test
#                     (tests/cli/web_browser.sh, which drives it with puppeteer-core; it
#                     reports itself skipped without it)
#   --with-clang      clang and its sanitizer/libFuzzer runtimes, for `make CC=clang test` and
#                     `make fuzz`
#   --with-postgres   PostgreSQL 15 and its server headers, for ext/pg_infer and its tests
#                     (tests/cli/pg_infer.sh reports itself skipped without them)
#   --with-lint       cppcheck, for `make lint`
set -e
PKGS="build-essential libpcre2-dev libjansson-dev libmicrohttpd-dev libcurl4-openssl-dev libedit-dev libpq-dev curl openssl python3 python3-jinja2"
node=""
for a in "$@"; do
    case "$a" in
    --with-node) node=1 ;;
    --with-chromium) PKGS="$PKGS chromium" ;;
    --with-clang) PKGS="$PKGS clang libclang-rt-dev" ;;
    --with-postgres) PKGS="$PKGS postgresql-15 postgresql-server-dev-15 haproxy" ;;
    --with-lint) PKGS="$PKGS cppcheck" ;;
    *) echo "usage: $0 [--with-node] [--with-chromium] [--with-clang] [--with-postgres] [--with-lint]" >&2; exit 2 ;;
    esac
done
missing=""
for p in $PKGS; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$node" ] && ! command -v npm >/dev/null 2>&1; then
    missing="$missing nodejs npm"
fi
if [ -n "$missing" ]; then
    echo "installing:$missing"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
