/* The replay runner of a fuzz target, built with the normal compiler into
 * $(BUILD)/tests/fuzz/test_<target> and run by `make test` (and `make asan`): every seed in
 * tests/fuzz/corpus/<target>/ and every regression input in tests/data/fuzz/<target>/ (inputs
 * the fuzzer once crashed on, kept after the fix) goes through the target's
 * LLVMFuzzerTestOneInput once. A target checks its properties with abort(), so a regression
 * fails this binary; each input that returns is one passed check. Extra arguments are more
 * files to replay (a crash file from `make fuzz`, say). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


#ifndef FUZZ_TARGET
#error "build with -DFUZZ_TARGET=\"fuzz_<name>\""
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int h_passed, h_failed; /* printed as tests/run.sh's "# totals" line */

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    /* an exact-size heap copy, as libFuzzer gives: a read past the end is caught by ASan */
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    fflush(stdout);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

/* one check per input: it returned (a broken property aborts the whole binary, which
 * tests/run.sh counts as a failure) */
static void replay_one(const char *path)
{
    if (replay_file(path) == 0) {
        h_passed++;
        printf("ok - replay %s\n", path);
    } else {
        h_failed++;
        printf("not ok - replay %s: cannot read\n", path);
    }
    fflush(stdout);
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static void replay_dir(const char *dir)
{
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, NULL, by_name);
    if (n < 0)
        return; /* no regressions for this target yet */
    for (int i = 0; i < n; i++) {
        if (ents[i]->d_name[0] != '.') {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dir, ents[i]->d_name);
            replay_one(p);
        }
        free(ents[i]);
    }
    free(ents);
}

int main(int argc, char **argv)
{
    replay_dir("tests/fuzz/corpus/" FUZZ_TARGET);
    replay_dir("tests/data/fuzz/" FUZZ_TARGET);
    for (int i = 1; i < argc; i++) {
        replay_one(argv[i]);
    }
    printf("# totals: %d passed, %d failed, 0 skipped\n", h_passed, h_failed);
    return h_failed ? 1 : 0;
}
