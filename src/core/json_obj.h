/* An empty jansson object, without naming lq_json_object().
 *
 * The PostgreSQL server executable exports a lq_json_object() of its own (the SQL function),
 * and a module that PostgreSQL loads (pg_infer, which links this library) would have its
 * calls to jansson's lq_json_object() bound to that one by the dynamic linker (symbol
 * interposition: the executable comes first) and crash. jansson's own functions reach
 * lq_json_object() through an internal reference, so json_pack("{}") is safe everywhere.
 * tests/cli/symbols.sh checks that the library never references json_object. */
#ifndef LQ_CORE_JSON_OBJ_H
#define LQ_CORE_JSON_OBJ_H

#include <jansson.h>

#include "core/json_obj.h"

static inline json_t *lq_json_object(void) { return json_pack("{}"); }

#endif
