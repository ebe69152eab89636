/* lq_generate against a real model: bitnet-tiny-a from ../shared/conformance, whose greedy
 * output must equal the reference "ms" greedy continuation. When that folder is absent, a
 * generated fixture stands in and the reference is the engine's own teacher-forced argmax
 * loop (lq_session_eval + argmax), so the generation logic is still checked. Stop strings,
 * EOS, max_tokens, context limits, cancel and seeded determinism are checked on top. */
#include "harness.h"

#include <jansson.h>

#include "larql/chat.h"
#include "larql/fixture.h"
#include "larql/generate.h"
#include "larql/model.h"
#include "larql/tokenizer.h"

static lq_model *g_model;
static int32_t g_ids[64];
static size_t g_n_ids;
static int32_t g_greedy[64];
static size_t g_n_greedy;
static float g_first_logit, g_first_lse; /* reference logit of greedy[0] and lse after ids */
static const char *g_skip;

/* Without the conformance data: a generated tiny BitNet model, and the reference greedy
 * continuation computed by a plain eval/argmax loop (the first prompt whose 16 greedy
 * tokens contain no end-of-sequence id). */
static void load_fixture(void)
{
    static char why[1024];
    lq_fixture_opts o;
    lq_err err = {0};
    char path[4200];
    snprintf(path, sizeof path, "%s/gen.gguf", harness_tmpdir());
    lq_model_opts opts = {0};
    opts.n_threads = 1;
    if (lq_fixture_preset(&o, "tiny", &err) || lq_fixture_write(&o, path, &err) ||
        lq_model_open(path, &opts, &g_model, &err)) {
        snprintf(why, sizeof why, "fixture: %s", err.msg);
        g_skip = why;
        g_model = NULL;
        return;
    }
    const lq_tokenizer *tok = lq_model_tokenizer(g_model);
    int32_t V = lq_tokenizer_n_vocab(tok), eos = lq_tokenizer_eos(tok), eot = lq_tokenizer_eot(tok);
    float *logits = malloc(sizeof(float) * (size_t)V);
    for (int start = 40; start < 240 && logits; start += 7) {
        g_n_ids = 12;
        for (size_t i = 0; i < g_n_ids; i++)
            g_ids[i] = (int32_t)(start + 3 * i) % 256;
        lq_session *s = NULL;
        if (lq_session_create(g_model, 64, &s, &err) ||
            lq_session_eval(s, g_ids, g_n_ids, logits, NULL, &err)) {
            lq_session_free(s);
            break;
        }
        g_first_lse = (float)lq_logsumexp(logits, V);
        int ok = 1;
        for (g_n_greedy = 0; g_n_greedy < 16 && ok; g_n_greedy++) {
            float best;
            int32_t id;
            lq_top_k(logits, V, 1, &id, &best);
            if (g_n_greedy == 0)
                g_first_logit = best;
            g_greedy[g_n_greedy] = id;
            ok = id != eos && id != eot && (g_n_greedy == 15 || !lq_session_decode(s, id, logits, &err));
        }
        lq_session_free(s);
        if (ok) {
            free(logits);
            return;
        }
    }
    free(logits);
    g_skip = "fixture: no prompt with a 16-token greedy continuation free of EOS";
}

static void load(void)
{
    static char why[1024];
    const char *dir = harness_conformance_dir();
    if (!dir) {
        load_fixture();
        return;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/bitnet/bitnet-tiny-a.expected.json", dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        snprintf(why, sizeof why, "cannot read bitnet-tiny-a.expected.json: %s", jerr.text);
        g_skip = why;
        return;
    }
    json_t *ids = json_object_get(root, "ids");
    json_t *ms = json_object_get(json_object_get(root, "modes"), "ms");
    json_t *greedy = json_object_get(ms, "greedy");
    json_t *pos = json_object_get(ms, "positions");
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v) if (i < 64) g_ids[g_n_ids++] = (int32_t)json_integer_value(v);
    json_array_foreach(greedy, i, v) if (i < 64) g_greedy[g_n_greedy++] = (int32_t)json_integer_value(v);
    json_t *last = json_array_get(pos, json_array_size(pos) - 1);
    g_first_logit = (float)json_number_value(json_array_get(json_array_get(json_object_get(last, "top"), 0), 1));
    g_first_lse = (float)json_number_value(json_object_get(last, "lse"));
    json_decref(root);
    if (g_n_ids == 0 || g_n_greedy != 16) {
        g_skip = "unexpected expected.json layout";
        return;
    }
    snprintf(path, sizeof path, "%s/bitnet/bitnet-tiny-a.gguf", dir);
    lq_model_opts opts = {0};
    opts.n_threads = 1;
    lq_err err = {0};
    if (lq_model_open(path, &opts, &g_model, &err) != LQ_OK) {
        snprintf(why, sizeof why, "cannot open bitnet-tiny-a.gguf: %s", err.msg);
        g_skip = why;
        g_model = NULL;
    }
}

/* Records what the callback saw. */
typedef struct rec {
    int32_t ids[256];
    int n;
    char text[8192];
    size_t len;
    float logprob[256];
    int flush_calls, null_logits;
    int cancel_after; /* return 1 after this many tokens (0 = never) */
} rec;

static int on_token(void *user, int32_t id, const char *text, size_t len, float logprob,
                    const float *logits)
{
    rec *r = user;
    if (len && r->len + len < sizeof r->text) {
        memcpy(r->text + r->len, text, len);
        r->len += len;
        r->text[r->len] = 0;
    }
    if (id < 0) {
        r->flush_calls++;
        return 0;
    }
    if (!logits)
        r->null_logits++;
    if (r->n < 256) {
        r->logprob[r->n] = logprob;
        r->ids[r->n] = id;
    }
    r->n++;
    return r->cancel_after && r->n >= r->cancel_after;
}

static lq_session *new_session(int n_ctx)
{
    lq_session *s = NULL;
    lq_err err = {0};
    int rc = lq_session_create(g_model, n_ctx, &s, &err);
    CHECK_MSG(rc == LQ_OK, "session: %s", err.msg);
    return s;
}

static void greedy_params(lq_generate_params *p, int max_tokens)
{
    lq_generate_defaults(p);
    p->max_tokens = max_tokens;
    p->sampling.temperature = 0.0f;
}

/* The reference text of the greedy continuation: the tokenizer's own stream decoder over
 * the reference ids (control tokens skipped, invalid UTF-8 as U+FFFD, as streamed), plus
 * its final flush. The random tiny model emits stray bytes, so lq_tokenizer_decode (raw
 * bytes) is not the right reference here. */
static char *greedy_text(size_t n, size_t *len)
{
    lq_detok *d = NULL;
    lq_err err = {0};
    *len = 0;
    if (lq_detok_create(lq_model_tokenizer(g_model), LQ_DETOK_SKIP_SPECIAL, &d, &err) != LQ_OK) {
        CHECK_MSG(0, "detok: %s", err.msg);
        return NULL;
    }
    lq_detok_reset(d, 0); /* continues the prompt */
    char *t = malloc(n * 512 + 512);
    char piece[512];
    size_t pl;
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_INT(lq_detok_push(d, g_greedy[i], piece, sizeof piece, &pl, &err), LQ_OK);
        memcpy(t + *len, piece, pl);
        *len += pl;
    }
    lq_detok_flush(d, piece, sizeof piece, &pl);
    memcpy(t + *len, piece, pl);
    *len += pl;
    t[*len] = 0;
    lq_detok_free(d);
    return t;
}

static void test_greedy_matches_reference(void)
{
    if (g_skip)
        SKIP("%s", g_skip);
    lq_session *s = new_session(0);
    lq_generate_params p;
    greedy_params(&p, 16);
    p.full_logits = 1; /* the logprobs below are over the whole vocabulary */
    static rec r;
    memset(&r, 0, sizeof r);
    lq_generate_result res;
    lq_err err = {0};
    int rc = lq_generate(s, g_ids, g_n_ids, &p, on_token, &r, &res, &err);
    CHECK_MSG(rc == LQ_OK, "generate: %s", err.msg);
    CHECK_EQ_INT(res.n_prompt, (int)g_n_ids);
    CHECK_EQ_INT(res.n_generated, 16);
    CHECK_EQ_INT(res.finish, LQ_FINISH_LENGTH);
    CHECK_EQ_INT(r.n, 16);
    for (int i = 0; i < 16 && i < r.n; i++)
        CHECK_MSG(r.ids[i] == g_greedy[i], "token %d: got %d want %d", i, (int)r.ids[i],
                  (int)g_greedy[i]);
    CHECK_EQ_INT(r.null_logits, 0);
    /* logprob of the first token = reference logit - reference lse */
    CHECK_NEAR(r.logprob[0], g_first_logit - g_first_lse, 2e-3);
    for (int i = 0; i < r.n; i++)
        CHECK(r.logprob[i] <= 0.0f && isfinite(r.logprob[i]));
    /* streamed text (plus the final flush) equals the reference ids' stream decoding */
    size_t tl = 0;
    char *t = greedy_text(16, &tl);
    CHECK_EQ_INT(r.len, tl);
    CHECK(t && memcmp(r.text, t, tl) == 0);
    free(t);
    /* the last token is not decoded: the session holds prompt + 15 */
    CHECK_EQ_INT(lq_session_pos(s), (int)g_n_ids + 15);
    CHECK(res.prefill_ms >= 0.0 && res.decode_ms >= 0.0);
    lq_session_free(s);
}

static void test_stop_string_mid_stream(void)
{
    if (g_skip)
        SKIP("%s", g_skip);
    size_t tl = 0;
    char *t = greedy_text(16, &tl);
    if (!t)
        return;
    /* A 3-byte stop string taken from the middle of the text; its first occurrence decides. */
    size_t at = tl / 2;
    if (tl < 8) {
        free(t);
        SKIP("greedy text too short (%zu bytes)", tl);
    }
    char stop[4] = {t[at], t[at + 1], t[at + 2], 0};
    if (strlen(stop) != 3) {
        free(t);
        SKIP("greedy text has a NUL byte near the middle");
    }
    const char *first = memmem(t, tl, stop, 3);
    size_t want = (size_t)(first - t);
    const char *stops[] = {"never-occurs-xyz", stop};
    lq_session *s = new_session(0);
    lq_generate_params p;
    greedy_params(&p, 16);
    p.stop = stops;
    p.n_stop = 2;
    static rec r;
    memset(&r, 0, sizeof r);
    lq_generate_result res;
    lq_err err = {0};
    int rc = lq_generate(s, g_ids, g_n_ids, &p, on_token, &r, &res, &err);
    CHECK_MSG(rc == LQ_OK, "generate: %s", err.msg);
    CHECK_EQ_INT(res.finish, LQ_FINISH_STOP);
    CHECK(res.n_generated < 16);
    CHECK_EQ_INT(r.flush_calls, 0);
    CHECK_EQ_INT(r.len, want);
    CHECK(memcmp(r.text, t, want) == 0);
    CHECK(memmem(r.text, r.len, stop, 3) == NULL);
    for (int i = 0; i < r.n; i++)
        CHECK_EQ_INT(r.ids[i], g_greedy[i]);
    free(t);
    lq_session_free(s);
}

static void test_max_tokens_zero(void)
{
    if (g_skip)
        SKIP("%s", g_skip);
    lq_session *s = new_session(0);
    lq_generate_params p;
    greedy_params(&p, 0);
    static rec r;
    memset(&r, 0, sizeof r);
    lq_generate_result res;
    lq_err err = {0};
    CHECK_EQ_INT(lq_generate(s, g_ids, g_n_ids, &p, on_token, &r, &res, &err), LQ_OK);
    CHECK_EQ_INT(res.n_generated, 0);
    CHECK_EQ_INT(res.finish, LQ_FINISH_LENGTH);
    CHECK_EQ_INT(r.n, 0);
    CHECK_EQ_INT(r.flush_calls, 0);
    CHECK_EQ_INT(lq_session_pos(s), (int)g_n_ids); /* the prompt was still appended */
    lq_session_free(s);
}

static void test_context_limits(void)
{
    if (g_skip)
        SKIP("%s", g_skip);
    lq_err err = {0};
    lq_generate_params p;
    greedy_params(&p, 16);
    /* prompt larger than the context */
    lq_session *s = new_session(8);
    lq_generate_result res;
    CHECK_EQ_INT(lq_generate(s, g_ids, g_n_ids, &p, NULL, NULL, &res, &err), LQ_ECONTEXT);
    CHECK_STR_CONTAINS(err.msg, "context");
    CHECK_EQ_INT(lq_session_pos(s), 0);
    lq_session_free(s);
    /* room for 3 tokens: max_tokens clamped, finish LENGTH, same greedy tokens */
    s = new_session((int)g_n_ids + 3);
    static rec r;
    memset(&r, 0, sizeof r);
    CHECK_EQ_INT(lq_generate(s, g_ids, g_n_ids, &p, on_token, &r, &res, &err), LQ_OK);
    CHECK_EQ_INT(res.n_generated, 3);
    CHECK_EQ_INT(res.finish, LQ_FINISH_LENGTH);
    for (int i = 0; i < 3 && i < r.n; i++)
        CHECK_EQ_INT(r.ids[i], g_greedy[i]);
    /* a second call continues at the session position: now the context is full */
    int32_t one = g_greedy[2];
    CHECK_EQ_INT(lq_generate(s, &one, 1, &p, NULL, NULL, &res, &err), LQ_OK);
    CHECK_EQ_INT(res.n_generated, 0);
    CHECK_EQ_INT(res.finish, LQ_FINISH_LENGTH);
    CHECK_EQ_INT(lq_generate(s, &one, 1, &p, NULL, NULL, &res, &err), LQ_ECONTEXT);
    lq_session_free(s);
}

static void test_bad_arguments(void)
{
    if (g_skip)
        SKIP("%s", g_skip);
    lq_session *s = new_session(0);
    lq_generate_params p;
    greedy_params(&p, 4);
    lq_generate_result res;
    lq_err err = {0};
    CHECK_EQ_INT(lq_generate(s, g_ids, 0, &p, NULL, NULL, &res, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "empty prompt");
    CHECK_EQ_INT(lq_generate(s, NULL, 3, &p, NULL, NULL, &res, &err), LQ_EINVAL);
    CHECK_EQ_INT(lq_generate(NULL, g_ids, 3, &p, NULL, NULL, &res, &err), LQ_EINVAL);
    p.max_tokens = -1;
    CHECK_EQ_INT(lq_generate(s, g_ids, 3, &p, NULL, NULL, &res, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "max_tokens");
    greedy_params(&p, 4);
    p.sampling.top_p = 2.0f;
    CHECK_EQ_INT(lq_generate(s, g_ids, 3, &p, NULL, NULL, &res, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "top_p");
    greedy_params(&p, 4);
    const char *empty[] = {""};
    p.stop = empty;
    p.n_stop = 1;
    CHECK_EQ_INT(lq_generate(s, g_ids, 3, &p, NULL, NULL, &res, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "empty");
    greedy_params(&p, 4);
    int32_t bad_eos = 100000;
    p.eos_ids = &bad_eos;
    p.n_eos = 1;
    CHECK_EQ_INT(lq_generate(s, g_ids, 3, &p, NULL, NULL, &res, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "eos_ids[0]");
    CHECK_EQ_INT(lq_session_pos(s), 0); /* nothing ran */
    greedy_params(&p, 4);
    int32_t bad_prompt[2] = {1, 99999};
    CHECK(lq_generate(s, bad_prompt, 2, &p, NULL, NULL, &res, &err) != LQ_OK);
    lq_session_free(s);
}

static void test_cancel_from_callback(void)
{
    if (g_skip)
        SKIP("%s", g_skip);
    lq_session *s = new_session(0);
    lq_generate_params p;
    greedy_params(&p, 16);
    static rec r;
    memset(&r, 0, sizeof r);
    r.cancel_after = 3;
    lq_generate_result res;
    lq_err err = {0};
    CHECK_EQ_INT(lq_generate(s, g_ids, g_n_ids, &p, on_token, &r, &res, &err), LQ_OK);
    CHECK_EQ_INT(res.finish, LQ_FINISH_CANCELED);
    CHECK_EQ_INT(res.n_generated, 3);
    CHECK_EQ_INT(r.n, 3);
    CHECK_EQ_INT(r.flush_calls, 0);
    CHECK_EQ_INT(lq_session_pos(s), (int)g_n_ids + 2);
    lq_session_free(s);
}

static void test_eos(void)
{
    if (g_skip)
        SKIP("%s", g_skip);
    lq_session *s = new_session(0);
    lq_generate_params p;
    greedy_params(&p, 16);
    int32_t eos = g_greedy[5];
    int first = 5;
    for (int i = 0; i < 5; i++)
        if (g_greedy[i] == eos)
            first = i;
    p.eos_ids = &eos;
    p.n_eos = 1;
    static rec r;
    memset(&r, 0, sizeof r);
    lq_generate_result res;
    lq_err err = {0};
    CHECK_EQ_INT(lq_generate(s, g_ids, g_n_ids, &p, on_token, &r, &res, &err), LQ_OK);
    CHECK_EQ_INT(res.finish, LQ_FINISH_EOS);
    CHECK_EQ_INT(res.n_generated, first);
    for (int i = 0; i < r.n; i++)
        CHECK(r.ids[i] != eos); /* the EOS id is never passed */
    CHECK_EQ_INT(lq_session_pos(s), (int)g_n_ids + first);
    /* ignore_eos: all 16 */
    lq_session_reset(s);
    p.ignore_eos = 1;
    memset(&r, 0, sizeof r);
    CHECK_EQ_INT(lq_generate(s, g_ids, g_n_ids, &p, on_token, &r, &res, &err), LQ_OK);
    CHECK_EQ_INT(res.finish, LQ_FINISH_LENGTH);
    CHECK_EQ_INT(res.n_generated, 16);
    /* an explicit empty list: no EOS at all */
    lq_session_reset(s);
    p.ignore_eos = 0;
    p.n_eos = 0;
    CHECK_EQ_INT(lq_generate(s, g_ids, g_n_ids, &p, NULL, NULL, &res, &err), LQ_OK);
    CHECK_EQ_INT(res.n_generated, 16);
    lq_session_free(s);
}

static void run_sampled(uint64_t seed, rec *r)
{
    lq_session *s = new_session(0);
    lq_generate_params p;
    lq_generate_defaults(&p);
    p.max_tokens = 24;
    p.ignore_eos = 1;
    p.sampling.temperature = 1.0f;
    p.sampling.top_k = 0;
    p.sampling.top_p = 1.0f;
    p.sampling.min_p = 0.0f;
    p.sampling.has_seed = 1;
    p.sampling.seed = seed;
    p.sampling.frequency_penalty = 0.3f;
    memset(r, 0, sizeof *r);
    lq_generate_result res;
    lq_err err = {0};
    CHECK_EQ_INT(lq_generate(s, g_ids, g_n_ids, &p, on_token, r, &res, &err), LQ_OK);
    CHECK_EQ_INT(res.n_generated, 24);
    lq_session_free(s);
}

static void test_seeded_sampling_is_deterministic(void)
{
    if (g_skip)
        SKIP("%s", g_skip);
    static rec a, b, c;
    run_sampled(7, &a);
    run_sampled(7, &b);
    run_sampled(8, &c);
    CHECK_EQ_INT(a.n, b.n);
    CHECK(memcmp(a.ids, b.ids, sizeof a.ids) == 0);
    CHECK_EQ_INT(a.len, b.len);
    CHECK(memcmp(a.text, b.text, a.len) == 0);
    CHECK(memcmp(a.ids, c.ids, 24 * sizeof a.ids[0]) != 0);
}

static void test_chat_template_for_model(void)
{
    if (g_skip)
        SKIP("%s", g_skip);
    /* bitnet-b1.58 with <|eot_id|> in the vocabulary and no chat_template metadata */
    CHECK_EQ_INT(lq_chat_template_for_model(g_model), LQ_CHAT_BITNET);
    CHECK_EQ_INT(lq_chat_template_for_model(NULL), LQ_CHAT_PLAIN);
}

/* stories260K (llama, SentencePiece): llama2.c's greedy golden output, token for token, and
 * its text. [A] starts from a lone BOS, so the first piece's leading space is stripped;
 * [B] continues a prompt, so it is kept. */
static int parse_ids(const char *line, const char *tag, int32_t *out, int cap)
{
    const char *p = strstr(line, tag);
    if (!p)
        return -1;
    p += strlen(tag);
    int n = 0;
    char *end;
    for (;;) {
        long v = strtol(p, &end, 10);
        if (end == p || n >= cap)
            break;
        out[n++] = (int32_t)v;
        p = end;
    }
    return n;
}

static void unescape_nl(char *s)
{
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] == 'n') {
            *w++ = '\n';
            r++;
        } else {
            *w++ = *r;
        }
    }
    *w = 0;
}

static void test_stories260k_golden(void)
{
    const char *dir = harness_conformance_dir();
    if (!dir)
        SKIP("../shared/conformance absent");
    char path[4200];
    snprintf(path, sizeof path, "%s/llama/stories260K_golden.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        SKIP("stories260K_golden.txt absent");
    static char line[8192];
    static int32_t a_next[128], b_prompt[64], b_next[128];
    static char a_text[8192], b_text[8192];
    int na = -1, nbp = -1, nbn = -1;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "[A] next ids", 12))
            na = parse_ids(line, "ids): ", a_next, 128);
        else if (!strncmp(line, "[A] text: ", 10))
            snprintf(a_text, sizeof a_text, "%s", line + 10);
        else if (!strncmp(line, "[B] prompt", 10))
            nbp = parse_ids(line, "dummy prefix): ", b_prompt, 64);
        else if (!strncmp(line, "[B] next ids", 12))
            nbn = parse_ids(line, "prompt tokens): ", b_next, 128);
        else if (!strncmp(line, "[B] text: ", 10))
            snprintf(b_text, sizeof b_text, "%s", line + 10);
    }
    fclose(f);
    if (na < 10 || nbp < 2 || nbn <= nbp)
        SKIP("unexpected golden file layout (%d %d %d)", na, nbp, nbn);
    unescape_nl(a_text);
    unescape_nl(b_text);
    /* run.c prints one "\n" after the generated text: not part of the model's output */
    size_t al = strlen(a_text), bl = strlen(b_text);
    if (al && a_text[al - 1] == '\n')
        a_text[al - 1] = 0;
    if (bl && b_text[bl - 1] == '\n')
        b_text[bl - 1] = 0;
    snprintf(path, sizeof path, "%s/llama/stories260K.gguf", dir);
    lq_model *m = NULL;
    lq_model_opts opts = {0};
    opts.n_threads = 1;
    lq_err err = {0};
    if (lq_model_open(path, &opts, &m, &err) != LQ_OK) {
        CHECK_MSG(0, "open stories260K: %s", err.msg);
        return;
    }
    lq_session *s = NULL;
    CHECK_EQ_INT(lq_session_create(m, 0, &s, &err), LQ_OK);
    lq_generate_params p;
    greedy_params(&p, na);
    p.ignore_eos = 1;
    static rec r;
    memset(&r, 0, sizeof r);
    lq_generate_result res;
    int32_t bos = 1;
    CHECK_EQ_INT(lq_generate(s, &bos, 1, &p, on_token, &r, &res, &err), LQ_OK);
    CHECK_EQ_INT(r.n, na);
    for (int i = 0; i < na && i < r.n; i++)
        CHECK_MSG(r.ids[i] == a_next[i], "[A] token %d: got %d want %d", i, (int)r.ids[i],
                  (int)a_next[i]);
    CHECK_MSG(strcmp(r.text, a_text) == 0, "[A] text\n got: [%s]\nwant: [%s]", r.text, a_text);

    /* [B]: the prompt ids, then the tokens after the forced ones */
    lq_session_reset(s);
    int ngen = nbn - (nbp - 1);
    greedy_params(&p, ngen);
    p.ignore_eos = 1;
    memset(&r, 0, sizeof r);
    CHECK_EQ_INT(lq_generate(s, b_prompt, (size_t)nbp, &p, on_token, &r, &res, &err), LQ_OK);
    CHECK_EQ_INT(r.n, ngen);
    for (int i = 0; i < ngen && i < r.n; i++)
        CHECK_MSG(r.ids[i] == b_next[nbp - 1 + i], "[B] token %d: got %d want %d", i,
                  (int)r.ids[i], (int)b_next[nbp - 1 + i]);
    const char *prompt_text = "Once upon a time, there was a dog";
    size_t pl = strlen(prompt_text);
    CHECK(strncmp(b_text, prompt_text, pl) == 0);
    CHECK_MSG(strcmp(r.text, b_text + pl) == 0, "[B] text\n got: [%s]\nwant: [%s]", r.text,
              b_text + pl);
    lq_session_free(s);
    lq_model_close(m);
}

int main(void)
{
    load();
    RUN(test_greedy_matches_reference);
    RUN(test_stop_string_mid_stream);
    RUN(test_max_tokens_zero);
    RUN(test_context_limits);
    RUN(test_bad_arguments);
    RUN(test_cancel_from_callback);
    RUN(test_eos);
    RUN(test_seeded_sampling_is_deterministic);
    RUN(test_chat_template_for_model);
    RUN(test_stories260k_golden);
    lq_model_close(g_model);
    return harness_done();
}
