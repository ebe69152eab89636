/* Scratch directories for test and fuzz processes: unique (mkdtemp), removed with everything
 * in them when the process exits normally, so that a test run leaves nothing in /tmp or
 * /dev/shm. */
#ifndef LARQL_TESTS_SCRATCH_H
#define LARQL_TESTS_SCRATCH_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SCRATCH_MAX 8

static char scratch_dirs[SCRATCH_MAX][512];
static int scratch_n;

static int scratch_rm1(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(p);
    return 0;
}

static void scratch_cleanup(void)
{
    for (int i = 0; i < scratch_n; i++)
        nftw(scratch_dirs[i], scratch_rm1, 16, FTW_DEPTH | FTW_PHYS);
}

/* A new directory named prefix.XXXXXX under $TMPDIR (or /tmp; /dev/shm first with in_memory),
 * removed at exit. NULL when it cannot be made. */
static inline const char *scratch_dir(const char *prefix, int in_memory)
{
    if (scratch_n == SCRATCH_MAX)
        return NULL;
    const char *t = getenv("TMPDIR");
    const char *base = in_memory && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : t && *t ? t : "/tmp";
    char *d = scratch_dirs[scratch_n];
    snprintf(d, sizeof scratch_dirs[0], "%s/%s.XXXXXX", base, prefix);
    if (!mkdtemp(d))
        return NULL;
    if (scratch_n++ == 0)
        atexit(scratch_cleanup);
    return d;
}

#endif
