/* Read-only memory mapping of a whole file. Models are mapped, never read into the heap. */
#ifndef LQ_CORE_MAPFILE_H
#define LQ_CORE_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "larql/status.h"

typedef struct lq_mapfile {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;
} lq_mapfile;

/* Maps path read-only. Empty files map to {NULL, 0}. Errors name the path and errno text. */
int lq_mapfile_open(lq_mapfile *m, const char *path, lq_err *err);
void lq_mapfile_close(lq_mapfile *m);

/* Hint the kernel to read ahead (MADV_WILLNEED) or to keep pages (used after load). */
void lq_mapfile_advise_willneed(const lq_mapfile *m);

#endif
