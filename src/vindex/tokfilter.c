/* Public names for the token filters the queries use (LARQL's / pg_infer's
 * is_readable_token and is_content_token), so front ends filter exactly as the library does. */
#include "larql/vindex.h"
#include "vindex/vindex_internal.h"

int lq_vindex_token_readable(const char *s)
{
    return s ? lq_vx_is_readable(s) : 0;
}
