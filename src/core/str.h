/* Small string helpers the modules share (ASCII case rules, as LARQL's comparisons are). */
#ifndef LQ_CORE_STR_H
#define LQ_CORE_STR_H

#include <string.h>

/* 1 when needle occurs in hay ignoring ASCII case; an empty needle occurs in any hay; a NULL
 * hay or needle contains nothing. */
static inline int lq_icontains(const char *hay, const char *needle)
{
    return hay && needle && strcasestr(hay, needle) != NULL;
}

#endif
