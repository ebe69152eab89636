/* pg_infer: the module's entry point. The settings are in gucs.c, the helpers every file
 * uses in util.c; the SQL functions live one group a file (pg_infer.h). */
#include "pg_infer.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	pgi_gucs_define();
	pgi_am_init();
	pgi_guard_init(pgi_cache_close_local); /* a vanished page closes every local model */
}
