/* Minimal test harness: each test binary runs its cases, prints one line per case
 * ("ok - name" / "not ok - name" with the failing checks before it), and ends with
 * "# <binary>: N passed, N failed, N skipped". tests/run.sh adds the counts up.
 *
 *   static void test_something(void) { CHECK(x == 1); CHECK_EQ_INT(a, b); }
 *   int main(void) { RUN(test_something); return harness_done(); }
 *
 * A case calls SKIP("reason") to report itself skipped (e.g. conformance data absent). */
#ifndef LQ_TEST_HARNESS_H
#define LQ_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scratch.h"

static int h_passed, h_failed, h_skipped;
static int h_case_failed, h_case_skipped;
static const char *h_case_name;

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            h_case_failed = 1;                                                             \
            fprintf(stdout, "#   %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);  \
        }                                                                                  \
    } while (0)

#define CHECK_MSG(cond, ...)                                                               \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            h_case_failed = 1;                                                             \
            fprintf(stdout, "#   %s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);  \
            fprintf(stdout, __VA_ARGS__);                                                  \
            fputc('\n', stdout);                                                           \
        }                                                                                  \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                 \
    do {                                                                                   \
        long long h_a = (long long)(a), h_b = (long long)(b);                              \
        if (h_a != h_b) {                                                                  \
            h_case_failed = 1;                                                             \
            fprintf(stdout, "#   %s:%d: %s == %s failed: %lld != %lld\n", __FILE__,       \
                    __LINE__, #a, #b, h_a, h_b);                                           \
        }                                                                                  \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                              \
    do {                                                                                   \
        double h_a = (double)(a), h_b = (double)(b);                                       \
        if (!(fabs(h_a - h_b) <= (tol))) {                                                 \
            h_case_failed = 1;                                                             \
            fprintf(stdout, "#   %s:%d: |%s - %s| <= %g failed: %.9g vs %.9g\n", __FILE__, \
                    __LINE__, #a, #b, (double)(tol), h_a, h_b);                            \
        }                                                                                  \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                                    \
    do {                                                                                   \
        const char *h_h = (hay), *h_n = (needle);                                          \
        if (!h_h || !strstr(h_h, h_n)) {                                                   \
            h_case_failed = 1;                                                             \
            fprintf(stdout, "#   %s:%d: \"%s\" does not contain \"%s\"\n", __FILE__,      \
                    __LINE__, h_h ? h_h : "(null)", h_n);                                  \
        }                                                                                  \
    } while (0)

#define SKIP(...)                                                                          \
    do {                                                                                   \
        h_case_skipped = 1;                                                                \
        fprintf(stdout, "#   skipped: ");                                                  \
        fprintf(stdout, __VA_ARGS__);                                                      \
        fputc('\n', stdout);                                                               \
        return;                                                                            \
    } while (0)

#define RUN(fn)                                                                            \
    do {                                                                                   \
        h_case_failed = 0;                                                                 \
        h_case_skipped = 0;                                                                \
        h_case_name = #fn;                                                                 \
        fn();                                                                              \
        if (h_case_failed) {                                                               \
            h_failed++;                                                                    \
            printf("not ok - %s\n", h_case_name);                                          \
        } else if (h_case_skipped) {                                                       \
            h_skipped++;                                                                   \
            printf("ok - %s # SKIP\n", h_case_name);                                       \
        } else {                                                                           \
            h_passed++;                                                                    \
            printf("ok - %s\n", h_case_name);                                              \
        }                                                                                  \
        fflush(stdout);                                                                    \
    } while (0)

static inline int harness_done(void)
{
    printf("# totals: %d passed, %d failed, %d skipped\n", h_passed, h_failed, h_skipped);
    return h_failed ? 1 : 0;
}

/* Path of the shared conformance folder (../shared/conformance from the project root),
 * or NULL when absent. LQ_CONFORMANCE overrides it. */
static inline const char *harness_conformance_dir(void)
{
    static char buf[4096];
    const char *env = getenv("LQ_CONFORMANCE");
    const char *dir = env && *env ? env : "../shared/conformance";
    snprintf(buf, sizeof buf, "%s/README.md", dir);
    FILE *f = fopen(buf, "r");
    if (!f)
        return NULL;
    fclose(f);
    snprintf(buf, sizeof buf, "%s", dir);
    return buf;
}

/* A fresh temporary directory for this test binary (under $TMPDIR or /tmp), removed with its
 * contents when the binary exits. */
static inline const char *harness_tmpdir(void)
{
    static const char *dir;
    if (!dir && !(dir = scratch_dir("larql-test", 0)))
        perror("mkdtemp");
    return dir;
}

/* The whole file at path, malloc'd and NUL-terminated (*len its size), or NULL. */
static inline char *harness_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        *len = (size_t)n;
    }
    return b;
}

#endif
