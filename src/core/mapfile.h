/* Read-only memory mapping of a whole file. Models are mapped, never read into the heap. */
#ifndef LQ_CORE_MAPFILE_H
#define LQ_CORE_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "larql/status.h"

typedef struct lq_mapfile {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;
    size_t mapped;       /* 0: a mapping of the file; else a copy in mapped bytes of 2 MB pages */
} lq_mapfile;

/* Maps path read-only. Empty files map to {NULL, 0}. Errors name the path and errno text. */
int lq_mapfile_open(lq_mapfile *m, const char *path, lq_err *err);
void lq_mapfile_close(lq_mapfile *m);

/* Weights streamed from a file mapping sit in 4 KB page-cache pages: the hardware prefetcher
 * stops at every page and the TLB misses, which costs decode about 40% of its read rate.
 * These read data into anonymous memory backed by 2 MB pages instead (private RSS). */

/* bytes of anonymous memory, rounded up to 2 MB (*mapped), MADV_HUGEPAGE; NULL on failure. */
void *lq_huge_alloc(size_t bytes, size_t *mapped);
void lq_huge_free(void *p, size_t mapped);
/* path read once into lq_huge_alloc memory, read-only afterwards. LQ_ENOMEM when the memory
 * cannot be mapped (callers may fall back to lq_mapfile_open). cancel: NULL, or a flag read
 * (atomically) between 64 MiB reads: once set, the copy stops with LQ_ECANCELED. */
int lq_mapfile_open_copy(lq_mapfile *m, const char *path, const int *cancel, lq_err *err);
/* The weight-holding policy: mode > 0 copy, < 0 map, 0 auto = copy when `bytes` >= 64 MiB.
 * LQ_HUGEPAGES=0|1 in the environment overrides mode. */
int lq_want_huge_copy(int mode, uint64_t bytes);


#endif
