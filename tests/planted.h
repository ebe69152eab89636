/* A planted-knowledge fixture for the unit tests (test_overlay, test_lql_life): a 4-layer
 * demo BitNet GGUF written from corpus, the facts planted into it, and its inference-level
 * vindex (with the packed ternary weights) opened with the model. Returns 0, or -1 after
 * printing why. */
#ifndef LQ_TESTS_PLANTED_H
#define LQ_TESTS_PLANTED_H

#include <stdio.h>

#include "larql/fixture.h"
#include "larql/model.h"
#include "larql/vindex.h"

static inline int planted_fixture(const char *gguf, const char *dir, const char *corpus, uint64_t seed,
                                  const lq_fact *facts, size_t n_facts, lq_vindex **v, lq_model **m)
{
    lq_fixture_opts o;
    lq_err err = {0};
    if (lq_fixture_preset(&o, "demo", &err))
        return printf("#   preset: %s\n", err.msg), -1;
    o.corpus = corpus;
    o.layers = 4;
    o.seed = seed;
    lq_vindex_build_opts bo;
    lq_vindex_build_opts_init(&bo);
    bo.level = LQ_VLEVEL_INFERENCE;
    bo.keep_quant = 1;
    bo.n_threads = 2;
    bo.extracted_at = "2026-01-01T00:00:00Z";
    lq_model_opts mo = {.n_threads = 2};
    if (lq_fixture_write(&o, gguf, &err) || lq_fixture_plant(gguf, facts, n_facts, &err) ||
        lq_vindex_build(gguf, dir, &bo, &err) || lq_vindex_open(dir, NULL, v, &err) ||
        lq_vindex_model_open(*v, &mo, m, &err))
        return printf("#   fixture: %s\n", err.msg), -1;
    return 0;
}

#endif
