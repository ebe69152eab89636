# larql — one library (build/liblarql.a), one command (build/larql), tests and benchmarks.
#
# Sources are found by wildcard: a new src/<module>/<file>.c is built without touching this
# file. Kernels named *_avx2.c / *_avx512.c get their ISA flags per file (chosen at run time by
# cpuid), so the binary runs on any x86-64: no -march=native here.

CC      ?= cc
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
WARN     = -std=c11 -Wall -Wextra -Wshadow -Werror
DEFS     = -D_GNU_SOURCE
INCS     = -Iinclude -Isrc $(shell pkg-config --cflags-only-I libpq 2>/dev/null || echo -I/usr/include/postgresql)
LIBS     = -lpcre2-8 -ljansson -lmicrohttpd -ledit -lpq -lm -lpthread
BUILD   ?= build
SAN     ?=

ALL_CFLAGS = $(CFLAGS) $(WARN) $(DEFS) $(INCS) -fPIC $(SAN) -MMD -MP
AVX2_FLAGS   = -mavx2 -mfma -mf16c -mbmi2
AVX512_FLAGS = -mavx2 -mfma -mf16c -mbmi2 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni

LIB_SRC  := $(sort $(shell find src -name '*.c' -not -path 'src/cli/*'))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c tests/conformance/test_*.c))
BENCH_SRC:= $(sort $(wildcard bench/bench_*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
# The built-in web page: web/'s files become byte arrays in a generated C source
# (tools/embed_web.c, a host tool built here), compiled into the server module.
WEB_FILES := $(sort $(wildcard web/*.html web/*.css web/*.js web/*.svg))
WEB_OBJ  := $(BUILD)/src/server/web_assets.o
LIB_OBJ  += $(WEB_OBJ)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_BIN := $(TEST_SRC:%.c=$(BUILD)/%)
BENCH_BIN:= $(BENCH_SRC:%.c=$(BUILD)/%)
# each libFuzzer target also builds with the normal compiler as a replay runner of its seeds
# and regression inputs (tests/fuzz/replay.c), run by `make test`
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
REPLAY_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/tests/fuzz/test_%)

.PHONY: all lib test check bench clean asan demo FORCE
all: $(BUILD)/larql

lib: $(BUILD)/liblarql.a

# Objects remember the compiler and flags they were built with: `make CC=clang test` after a
# gcc build (or the other way round) rebuilds everything rather than mixing the two.
BUILD_ID = $(CC) $(ALL_CFLAGS)
$(BUILD)/.build-id: FORCE
	@mkdir -p $(BUILD)
	@echo '$(BUILD_ID)' | cmp -s - $@ || echo '$(BUILD_ID)' >$@
$(LIB_OBJ) $(CLI_OBJ): $(BUILD)/.build-id

$(BUILD)/tools/embed_web: tools/embed_web.c
	@mkdir -p $(dir $@)
	$(CC) -O1 -std=c11 -Wall -Wextra -Werror -o $@ $<

$(BUILD)/gen/web_assets.c: $(WEB_FILES) $(BUILD)/tools/embed_web
	@mkdir -p $(dir $@)
	$(BUILD)/tools/embed_web $@ $(WEB_FILES)

$(WEB_OBJ): $(BUILD)/gen/web_assets.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX2_FLAGS) -c $< -o $@

# The forward pass's element-wise loops (norms, ReLU^2 gating, residual adds) run on one
# thread between the parallel matvecs; -O2's "very cheap" vectoriser leaves them scalar
# (unknown trip counts, possible aliasing), which cost ~5% of a batched decode step and of
# prefill. -fno-trapping-math lets the ReLU^2 select be if-converted (values are unchanged;
# nothing here reads the floating-point exception flags).
# -fvect-cost-model is gcc's; other compilers (clang) get only what they accept.
cc_flag = $(shell $(CC) -Werror $(1) -x c -c /dev/null -o /dev/null 2>/dev/null && echo $(1))
$(BUILD)/src/engine/forward.o: ALL_CFLAGS += $(call cc_flag,-fvect-cost-model=dynamic) -fno-trapping-math

$(BUILD)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX512_FLAGS) -c $< -o $@

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# Only lq_*/LQ_* symbols leave the library. liblarql.a holds one object per module
# (src/<module>/), partially linked (ld -r) from the module's files, in which every other
# global is made local: helpers that a module's files share (tok_*, route_*, srv_* ...)
# resolve inside the module and never reach a host program (PostgreSQL links this archive
# into its backends), whatever new code names them. A program that calls one module pulls
# in that module and what it calls, not the server. tests/cli/symbols.sh checks the archive.
OBJCOPY ?= objcopy
MODULES := $(sort $(foreach f,$(LIB_SRC),$(word 2,$(subst /, ,$(f)))))
MOD_OBJ := $(MODULES:%=$(BUILD)/modules/%.o)
# A module's object also depends on the list of its files (a stamp rewritten only when the list
# changes), so that moving a file out of a module rebuilds it without the stale object.
define module_rule
$(BUILD)/modules/$(1).list: FORCE
	@mkdir -p $$(dir $$@)
	@echo '$(filter $(BUILD)/src/$(1)/%,$(LIB_OBJ))' | cmp -s - $$@ || echo '$(filter $(BUILD)/src/$(1)/%,$(LIB_OBJ))' >$$@
$(BUILD)/modules/$(1).o: $(filter $(BUILD)/src/$(1)/%,$(LIB_OBJ)) $(BUILD)/modules/$(1).list
	@mkdir -p $$(dir $$@)
	$(LD) -r -o $$@.all $$(filter %.o,$$^)
	$(OBJCOPY) --wildcard --keep-global-symbol='lq_*' --keep-global-symbol='LQ_*' $$@.all $$@
	@rm -f $$@.all
endef
$(foreach m,$(MODULES),$(eval $(call module_rule,$(m))))

# Tests, benchmarks and fuzz targets link liblarql_internal.a (every lq_ symbol global, so a
# unit test can reach a module's internals); the command and pg_infer link liblarql.a, in
# which only what a public header declares and what modules call in each other stays global
# (scripts/public_syms.sh; tests/cli/symbols.sh checks the list against symbols.allow).
$(BUILD)/liblarql_internal.a: $(MOD_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/public.syms: $(MOD_OBJ) $(wildcard include/larql/*.h) scripts/public_syms.sh
	sh scripts/public_syms.sh $@ $(MOD_OBJ)

PUB_OBJ := $(MODULES:%=$(BUILD)/public/%.o)
$(BUILD)/public/%.o: $(BUILD)/modules/%.o $(BUILD)/public.syms
	@mkdir -p $(dir $@)
	$(OBJCOPY) --keep-global-symbols=$(BUILD)/public.syms $< $@

$(BUILD)/liblarql.a: $(PUB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/larql: $(CLI_OBJ) $(BUILD)/liblarql.a
	$(CC) $(CFLAGS) $(SAN) -o $@ $(CLI_OBJ) $(BUILD)/liblarql.a $(LIBS)

$(BUILD)/tests/fuzz/test_%: tests/fuzz/%.c tests/fuzz/replay.c $(wildcard tests/fuzz/*.inc) tests/scratch.h $(BUILD)/liblarql_internal.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests -DFUZZ_TARGET='"$*"' -o $@ tests/fuzz/replay.c $< $(BUILD)/liblarql_internal.a $(LIBS)

$(BUILD)/tests/%: tests/%.c tests/harness.h tests/scratch.h $(BUILD)/liblarql_internal.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests -o $@ $< $(BUILD)/liblarql_internal.a $(LIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/liblarql_internal.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -I. -o $@ $< $(BUILD)/liblarql_internal.a $(LIBS)

# `make test`: every unit and conformance binary plus the CLI scripts; closes with
# "N passed, N failed".
test: $(BUILD)/larql $(TEST_BIN) $(REPLAY_BIN)
	@BUILD=$(BUILD) CC="$(CC)" SAN="$(SAN)" sh tests/run.sh

check: test

# Sanitizer build of the whole suite in its own build directory.
asan:
	$(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" test

# ThreadSanitizer build (build-tsan/) of the threaded tests and the server, run by tests/tsan.sh
# (the server part is the soak, TSAN_SOAK_SECONDS long).
TSAN_TESTS = tests/unit/test_threadpool tests/unit/test_scheduler tests/unit/test_forward \
             tests/unit/test_tokenizer tests/unit/test_vindex_build
TSAN_SOAK_SECONDS ?= 20
.PHONY: tsan
tsan:
	$(MAKE) BUILD=build-tsan OPT=-O1 SAN="-fsanitize=thread -fno-omit-frame-pointer" build-tsan/larql \
	    $(TSAN_TESTS:%=build-tsan/%)
	@BUILD=build-tsan TSAN_TESTS="$(TSAN_TESTS)" TSAN_SOAK_SECONDS=$(TSAN_SOAK_SECONDS) sh tests/tsan.sh

# `make fuzz [FUZZ_SECONDS=60]`: the libFuzzer targets tests/fuzz/fuzz_*.c, built with clang
# in build-fuzz/ (the library too, instrumented for coverage, ASan and UBSan), each run for
# FUZZ_SECONDS from its seeds in tests/fuzz/corpus/<target>/ (tests/fuzz/run.sh).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BIN := $(FUZZ_SRC:%.c=$(BUILD)/%)
.PHONY: fuzz fuzz-run
fuzz:
	$(MAKE) BUILD=build-fuzz CC=$(FUZZ_CC) OPT=-O1 \
	    SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" fuzz-run

fuzz-run: $(FUZZ_BIN)
	@BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_TARGETS="$(FUZZ_TARGETS)" sh tests/fuzz/run.sh

$(BUILD)/tests/fuzz/%: tests/fuzz/%.c $(wildcard tests/fuzz/*.inc) tests/scratch.h $(BUILD)/liblarql_internal.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fsanitize=fuzzer -o $@ $< $(BUILD)/liblarql_internal.a $(LIBS)

# `make lint`: cppcheck over src/, no findings of the error or warning class (tests/lint/cppcheck.sh)
.PHONY: lint
lint:
	@sh tests/lint/cppcheck.sh

# `make soak [SOAK_SECONDS=600] [SOAK_CLIENTS=4]`: the server under mixed loopback traffic
# (tests/cli/soak.sh, tests/http/soak.py); make test runs the same script for 20 s.
SOAK_SECONDS ?= 600
SOAK_CLIENTS ?= 4
.PHONY: soak
soak: $(BUILD)/larql
	@LARQL=$(BUILD)/larql SOAK_SECONDS=$(SOAK_SECONDS) SOAK_CLIENTS=$(SOAK_CLIENTS) sh tests/cli/soak.sh

bench: $(BUILD)/larql $(BENCH_BIN)
	@BUILD=$(BUILD) sh bench/run.sh

# `make bench-server`: larql serve under load on loopback (bench/server.sh).
.PHONY: bench-server
bench-server: $(BUILD)/larql $(BUILD)/bench/bench_server
	@BUILD=$(BUILD) sh bench/server.sh

# The README's main job: generate the embedded default model and run it.
demo: $(BUILD)/larql
	@sh scripts/demo.sh $(BUILD)

clean:
	rm -rf build build-asan build-clang build-fuzz build-tsan

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_BIN:=.d) $(BENCH_BIN:=.d) $(REPLAY_BIN:=.d)
