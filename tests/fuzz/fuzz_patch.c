/* libFuzzer target for the .vlp patch reader: the input is a patch file's text. It is parsed
 * (lq_patch_parse, the core of lq_patch_read, at the fixture's width), written back
 * (lq_patch_json), the written text parsed again (it must be accepted: what larql writes, it
 * reads), and the patch applied to a fresh overlay of a real vindex, where layers, features
 * and widths are checked against the base, then removed again.
 *
 * Built and run by `make fuzz` (seeds: tests/fuzz/corpus/fuzz_patch/). Properties checked:
 * no crash, no sanitizer report, no hang, every failure has a message and leaves no handle,
 * the round trip holds, an apply that fails leaves the overlay as it was (it can be freed
 * and another patch applied). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "larql/patch.h"
#include "fixture.inc"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static lq_vindex *v;
    lq_err err = {0};
    if (!v) {
        const char *dir = fuzz_fixture_vindex();
        if (!dir || lq_vindex_open(dir, NULL, &v, &err) != LQ_OK)
            abort();
    }
    int hidden = lq_vindex_get_info(v)->hidden_size;
    lq_patch *p = NULL;
    if (lq_patch_parse((const char *)data, size, "fuzz", hidden, &p, &err) != LQ_OK) {
        if (p || !err.msg[0])
            abort();
        return 0;
    }
    char *json = NULL;
    if (lq_patch_json(p, &json, &err) != LQ_OK)
        abort();
    lq_patch *q = NULL;
    if (lq_patch_parse(json, strlen(json), "fuzz", hidden, &q, &err) != LQ_OK)
        abort();
    size_t a[3], b[3];
    lq_patch_counts(p, &a[0], &a[1], &a[2]);
    lq_patch_counts(q, &b[0], &b[1], &b[2]);
    if (memcmp(a, b, sizeof a))
        abort();
    lq_patch_free(q);
    free(json);

    lq_overlay *o = NULL;
    if (lq_overlay_create(v, NULL, &o, &err) != LQ_OK)
        abort();
    if (lq_overlay_apply(o, p, &err) == LQ_OK) {
        if (lq_overlay_remove(o, lq_patch_name(p), &err) != LQ_OK)
            abort();
    } else if (!err.msg[0]) {
        abort();
    }
    lq_overlay_free(o);
    lq_patch_free(p);
    return 0;
}
