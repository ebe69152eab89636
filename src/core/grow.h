/* Growing an array: the one doubling rule the library's growable arrays share. */
#ifndef LQ_CORE_GROW_H
#define LQ_CORE_GROW_H

#include <stdint.h>
#include <stdlib.h>

/* Makes *p hold at least need elements of elem bytes (capacity *cap, doubled from 16 or from
 * what it was). 0, or -1 when the allocation fails or would overflow (*p and *cap as they
 * were). */
static inline int lq_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 16;
    while (nc < need) {
        if (nc > SIZE_MAX / 2)
            return -1;
        nc *= 2;
    }
    if (elem && nc > SIZE_MAX / elem)
        return -1;
    void *np = realloc(*p, nc * elem);
    if (!np)
        return -1;
    *p = np;
    *cap = nc;
    return 0;
}

#endif
