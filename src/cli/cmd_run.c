/* larql run (one prompt, streamed continuation) and larql chat (interactive, with the
 * model's chat template). Both are thin loops over lq_generate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "larql/chat.h"
#include "larql/generate.h"
#include "larql/grammar.h"
#include "larql/model.h"

typedef struct gen_args {
    lq_cli_model_args model;
    lq_generate_params gen;
    const char *stops[16];
    int n_stops;
    const char *tmpl; /* --chat-template (or --template) NAME|FILE */
    const char *system;
} gen_args;

/* Parses the sampling/generation options shared by run and chat. Returns 1 if argv[*i] was
 * one of them, 0 if not, -1 after a usage error. */
static int gen_opt(const char *C, const char *U, int argc, char **argv, int *i, gen_args *g)
{
    int r = lq_cli_model_opt(C, U, argc, argv, i, &g->model);
    if (r)
        return r;
    const char *o = argv[*i];
    static const char *const with_value[] = {"-n", "--max-tokens", "--temp", "--top-k", "--top-p",
                                             "--min-p", "--seed", "--repeat-penalty",
                                             "--frequency-penalty", "--presence-penalty", "--stop",
                                             "--template", "--chat-template", "--system", "--draft",
                                             "--draft-max"};
    int known = 0;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
        known |= !strcmp(o, with_value[k]);
    if (!known)
        return 0;
    if (*i + 1 >= argc) {
        lq_cli_usage(C, U, "option '%s' needs a value", o);
        return -1;
    }
    const char *v = argv[++*i];
    long n;
    double x;
    lq_sampler_params *sp = &g->gen.sampling;
    if (!strcmp(o, "-n") || !strcmp(o, "--max-tokens")) {
        if (lq_parse_long(v, 0, 1 << 20, &n))
            goto bad_int;
        g->gen.max_tokens = (int)n;
    } else if (!strcmp(o, "--draft")) {
        if (lq_cli_parse_draft(C, U, v, &g->gen.draft))
            return -1;
    } else if (!strcmp(o, "--draft-max")) {
        if (lq_parse_long(v, 1, LQ_DRAFT_MAX, &n)) {
            lq_cli_usage(C, U, "--draft-max: '%s' is not an integer in 1..%d", v, LQ_DRAFT_MAX);
            return -1;
        }
        g->gen.draft_max = (int)n;
    } else if (!strcmp(o, "--top-k")) {
        if (lq_parse_long(v, 0, 1 << 24, &n))
            goto bad_int;
        sp->top_k = (int)n;
    } else if (!strcmp(o, "--seed")) {
        if (lq_parse_long(v, 0, 0x7fffffffffffffffL, &n))
            goto bad_int;
        sp->seed = (uint64_t)n;
        sp->has_seed = 1;
    } else if (!strcmp(o, "--stop")) {
        if (g->n_stops >= 16) {
            lq_cli_usage(C, U, "at most 16 --stop strings");
            return -1;
        }
        g->stops[g->n_stops++] = v;
    } else if (!strcmp(o, "--template") || !strcmp(o, "--chat-template")) {
        g->tmpl = v; /* a name or a file: read and parsed once the model is open */
    } else if (!strcmp(o, "--system")) {
        g->system = v;
    } else {
        if (lq_parse_double(v, -1e9, 1e9, &x)) {
            lq_cli_usage(C, U, "%s: '%s' is not a number", o, v);
            return -1;
        }
        if (!strcmp(o, "--temp")) sp->temperature = (float)x;
        else if (!strcmp(o, "--top-p")) sp->top_p = (float)x;
        else if (!strcmp(o, "--min-p")) sp->min_p = (float)x;
        else if (!strcmp(o, "--repeat-penalty")) sp->repeat_penalty = (float)x;
        else if (!strcmp(o, "--frequency-penalty")) sp->frequency_penalty = (float)x;
        else sp->presence_penalty = (float)x;
    }
    return 1;
bad_int:
    lq_cli_usage(C, U, "%s: '%s' is not a non-negative integer", o, v);
    return -1;
}

static void gen_args_init(gen_args *g)
{
    memset(g, 0, sizeof *g);
    lq_cli_model_args_init(&g->model);
    lq_generate_defaults(&g->gen);
    g->gen.max_tokens = 128;
}

/* Finishes option parsing: validates sampling values, attaches stop strings. */
static int gen_args_finish(const char *C, gen_args *g)
{
    lq_err err = {0};
    if (lq_sampler_params_check(&g->gen.sampling, &err))
        return lq_cli_error(C, "%s", err.msg);
    g->gen.stop = g->n_stops ? g->stops : NULL;
    g->gen.n_stop = (size_t)g->n_stops;
    return 0;
}

typedef struct out_state {
    int ids_out;
    int32_t *ids;
    size_t n, cap;
} out_state;

static int on_token(void *user, int32_t id, const char *text, size_t len, float logprob, const float *logits)
{
    (void)logprob;
    (void)logits;
    out_state *o = user;
    if (id < 0) { /* end of stream: text that was held back (no new token) */
        if (!o->ids_out && len) {
            fwrite(text, 1, len, stdout);
            fflush(stdout);
        }
        return 0;
    }
    if (o->ids_out) {
        if (o->n == o->cap) {
            size_t nc = o->cap ? o->cap * 2 : 64;
            int32_t *ni = realloc(o->ids, nc * sizeof *ni);
            if (!ni)
                return 1;
            o->ids = ni;
            o->cap = nc;
        }
        o->ids[o->n++] = id;
    } else if (len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    return 0;
}

static void print_speed(const lq_generate_result *r)
{
    double pf = r->prefill_ms > 0 ? r->n_prompt * 1000.0 / r->prefill_ms : 0;
    /* the first generated token comes from the prefill logits: decode timed the rest */
    int nd = r->n_generated > 0 ? r->n_generated - 1 : 0;
    double dc = r->decode_ms > 0 ? nd * 1000.0 / r->decode_ms : 0;
    fprintf(stderr, "prefill %d tok %.1f tok/s, decode %d tok %.1f tok/s\n", r->n_prompt, pf, nd, dc);
    /* speculative decoding: draft tokens verified and kept (each kept one a pass saved) */
    if (r->drafted > 0)
        fprintf(stderr, "draft: %d passes verified %d drafted tokens, %d accepted (%.0f%%)\n",
                r->draft_steps, r->drafted, r->draft_accepted, 100.0 * r->draft_accepted / r->drafted);
    /* the bounded lm_head: rows computed exactly per sampled token (of the vocabulary) */
    if (r->lm_steps > 0)
        fprintf(stderr, "lm_head bounded: %.1f rows exact per token (%d tokens, %d over the whole vocabulary)\n",
                (double)r->lm_rows_exact / r->lm_steps, r->lm_steps, r->lm_full);
}

static const char *RUN_USAGE =
    "larql run MODEL [PROMPT | --prompt TEXT | --ids 1,2,3] [-n N] [--temp T] [--top-k K] [--top-p P]\n"
    "       [--min-p P] [--seed S] [--repeat-penalty X] [--frequency-penalty X] [--presence-penalty X]\n"
    "       [--stop TEXT]... [--threads N] [--act ms|float] [--ctx N] [--lm-head exact|bounded|q8] [--kv f32|f16|q8]\n"
    "       [--weights auto|copy|mmap] [--ffn URL [--ffn-timeout-secs S]] [--no-carried-edits]\n"
    "       [--chat [--chat-template NAME|FILE] [--system S]]\n"
    "       [--ids-out] [--ignore-eos] [--grammar FILE.gbnf | --json-schema FILE.json]\n"
    "       [--draft ngram|none] [--draft-max K]\n"
    "  PROMPT may follow MODEL as LARQL takes it; without a prompt (and without --ids) run is\n"
    "  larql chat on MODEL, as in LARQL";

int lq_cli_run(int argc, char **argv)
{
    const char *C = "run", *path = NULL, *prompt = NULL, *ids_arg = NULL, *pos_prompt = NULL;
    const char *grammar_file = NULL, *schema_file = NULL;
    int chat = 0;
    out_state os = {0};
    gen_args g;
    gen_args_init(&g);
    for (int i = 1; i < argc; i++) {
        int r = gen_opt(C, RUN_USAGE, argc, argv, &i, &g);
        if (r < 0)
            return 2;
        if (r)
            continue;
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: %s\n", RUN_USAGE);
            return 0;
        } else if (!strcmp(a, "--prompt") && i + 1 < argc) {
            prompt = argv[++i];
        } else if (!strcmp(a, "--ids") && i + 1 < argc) {
            ids_arg = argv[++i];
        } else if (!strcmp(a, "--grammar") && i + 1 < argc) {
            grammar_file = argv[++i];
        } else if (!strcmp(a, "--json-schema") && i + 1 < argc) {
            schema_file = argv[++i];
        } else if (!strcmp(a, "--chat")) {
            chat = 1;
        } else if (!strcmp(a, "--ids-out")) {
            os.ids_out = 1;
        } else if (!strcmp(a, "--ignore-eos")) {
            g.gen.ignore_eos = 1;
        } else if (a[0] == '-') {
            return lq_cli_usage(C, RUN_USAGE, "unknown option or missing value: '%s'", a);
        } else if (!path) {
            path = a;
        } else if (!pos_prompt) {
            pos_prompt = a; /* LARQL's `larql run MODEL PROMPT` */
        } else {
            return lq_cli_usage(C, RUN_USAGE, "unexpected argument '%s'", a);
        }
    }
    if (!path)
        return lq_cli_usage(C, RUN_USAGE, "MODEL is required");
    if (pos_prompt && prompt)
        return lq_cli_usage(C, RUN_USAGE, "the prompt is given twice (PROMPT and --prompt): give one");
    if (pos_prompt)
        prompt = pos_prompt;
    if (!prompt && !ids_arg && !chat) /* LARQL: `larql chat` is run without a prompt */
        return lq_cli_chat(argc, argv);
    if (!prompt == !ids_arg)
        return lq_cli_usage(C, RUN_USAGE, "give exactly one of PROMPT (or --prompt) and --ids");
    if (chat && ids_arg)
        return lq_cli_usage(C, RUN_USAGE, "--chat needs --prompt text");
    if (grammar_file && schema_file)
        return lq_cli_usage(C, RUN_USAGE, "give at most one of --grammar and --json-schema");
    if (gen_args_finish(C, &g))
        return 1;
    lq_grammar *grammar = NULL;
    if (grammar_file || schema_file) {
        const char *gf = grammar_file ? grammar_file : schema_file;
        char *text = NULL;
        size_t tlen = 0;
        lq_err gerr = {0};
        if (lq_read_file(gf, &text, &tlen))
            return lq_cli_error(C, "cannot read '%s'", gf);
        int grc = grammar_file ? lq_grammar_parse(text, tlen, &grammar, &gerr)
                               : lq_grammar_from_json_schema(text, tlen, &grammar, &gerr);
        free(text);
        if (grc)
            return lq_cli_error(C, "%s: %s", gf, gerr.msg);
        g.gen.grammar = grammar;
    }

    int32_t *ids = NULL;
    size_t n = 0;
    if (ids_arg && lq_parse_ids(ids_arg, &ids, &n)) {
        lq_grammar_free(grammar);
        return lq_cli_usage(C, RUN_USAGE, "--ids: '%s' is not a comma-separated list of token ids", ids_arg);
    }
    if (prompt && !*prompt) {
        lq_grammar_free(grammar);
        return lq_cli_error(C, "empty prompt");
    }

    lq_model *m = NULL;
    lq_session *s = NULL;
    char *rendered = NULL;
    int rc = 1;
    lq_err err = {0};
    if (lq_cli_open_model_edited(C, path, &g.model, &m))
        goto out;
    g.gen.hook = g.model.hook;
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    if (prompt) {
        const char *text = prompt;
        unsigned fl = lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0;
        if (chat) {
            lq_chat_format *fmt = NULL;
            if (lq_cli_chat_format(C, m, g.tmpl, &fmt))
                goto out;
            lq_chat_msg msgs[2];
            size_t nm = 0;
            if (g.system)
                msgs[nm++] = (lq_chat_msg){"system", g.system};
            msgs[nm++] = (lq_chat_msg){"user", prompt};
            int fe = lq_chat_format_render(fmt, msgs, nm, 1, NULL, &rendered, &err);
            lq_chat_format_free(fmt);
            if (fe) {
                lq_cli_error(C, "%s", err.msg);
                goto out;
            }
            text = rendered;
            fl |= LQ_TOK_PARSE_SPECIAL;
        }
        if (lq_tokenizer_encode(tok, text, strlen(text), fl, &ids, &n, &err)) {
            lq_cli_error(C, "%s", err.msg);
            goto out;
        }
    }
    if (lq_session_create(m, g.model.ctx, &s, &err)) {
        lq_cli_error(C, "%s", err.msg);
        goto out;
    }
    lq_generate_result res = {0};
    if (lq_generate(s, ids, n, &g.gen, on_token, &os, &res, &err)) {
        lq_cli_error(C, "%s", err.msg);
        goto out;
    }
    if (os.ids_out) {
        for (size_t k = 0; k < os.n; k++)
            printf("%s%d", k ? "," : "", os.ids[k]);
    }
    printf("\n");
    fflush(stdout);
    print_speed(&res);
    rc = 0;
out:
    lq_grammar_free(grammar);
    free(os.ids);
    free(ids);
    free(rendered);
    lq_session_free(s);
    lq_cli_close_model(m, &g.model);
    return rc;
}

/* ---- chat ---- */

static const char *CHAT_USAGE =
    "larql chat MODEL [--system TEXT] [--chat-template NAME|FILE] [-n N] [--temp T]\n"
    "       [--top-k K] [--top-p P] [--seed S] [--threads N] [--ctx N] [--act ms|float]\n"
    "       [--lm-head exact|bounded|q8] [--kv f32|f16|q8] [--draft ngram|none] [--draft-max K]\n"
    "  type a message and press enter; /reset starts over, /quit (or end of input) leaves";

typedef struct chat_reply {
    char *text;
    size_t len, cap;
} chat_reply;

static int on_chat_token(void *user, int32_t id, const char *text, size_t len, float logprob, const float *logits)
{
    (void)id;
    (void)logprob;
    (void)logits;
    chat_reply *r = user;
    if (!len)
        return 0;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    if (r->len + len + 1 > r->cap) {
        size_t nc = (r->len + len + 1) * 2;
        char *nt = realloc(r->text, nc);
        if (!nt)
            return 1;
        r->text = nt;
        r->cap = nc;
    }
    memcpy(r->text + r->len, text, len);
    r->len += len;
    r->text[r->len] = 0;
    return 0;
}

int lq_cli_chat(int argc, char **argv)
{
    const char *C = "chat", *path = NULL;
    gen_args g;
    gen_args_init(&g);
    g.gen.max_tokens = 512;
    for (int i = 1; i < argc; i++) {
        int r = gen_opt(C, CHAT_USAGE, argc, argv, &i, &g);
        if (r < 0)
            return 2;
        if (r)
            continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n", CHAT_USAGE);
            return 0;
        } else if (argv[i][0] == '-' || path) {
            return lq_cli_usage(C, CHAT_USAGE, "unexpected argument '%s'", argv[i]);
        }
        path = argv[i];
    }
    if (!path)
        return lq_cli_usage(C, CHAT_USAGE, "MODEL is required");
    if (gen_args_finish(C, &g))
        return 1;

    lq_model *m = NULL;
    lq_session *s = NULL;
    lq_err err = {0};
    int rc = 1, tty = isatty(0);
    lq_chat_msg *msgs = NULL;
    lq_chat_format *fmt = NULL;
    size_t nm = 0, cap = 0;
    char *line = NULL;
    size_t line_cap = 0;
    if (lq_cli_open_model_edited(C, path, &g.model, &m))
        goto out;
    g.gen.hook = g.model.hook;
    if (lq_session_create(m, g.model.ctx, &s, &err)) {
        lq_cli_error(C, "%s", err.msg);
        goto out;
    }
    if (lq_cli_chat_format(C, m, g.tmpl, &fmt))
        goto out;
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    if (tty)
        fprintf(stderr, "larql chat: %s template (%s), /reset to start over, /quit to leave\n",
                lq_chat_format_name(fmt), lq_chat_format_source(fmt));
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0)
            break;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = 0;
        if (!strcmp(line, "/quit") || !strcmp(line, "/exit"))
            break;
        if (!strcmp(line, "/reset") || nm == 0) {
            for (size_t k = 0; k < nm; k++)
                free((char *)msgs[k].content);
            nm = 0;
            if (g.system) {
                if (nm == cap) {
                    lq_chat_msg *nmsgs = realloc(msgs, (cap = cap ? cap * 2 : 8) * sizeof *msgs);
                    if (!nmsgs)
                        goto oom;
                    msgs = nmsgs;
                }
                msgs[nm++] = (lq_chat_msg){"system", strdup(g.system)};
            }
            if (!strcmp(line, "/reset"))
                continue;
        }
        if (!*line)
            continue;
        if (nm + 2 > cap) {
            lq_chat_msg *nmsgs = realloc(msgs, (cap = cap ? cap * 2 : 8) * sizeof *msgs);
            if (!nmsgs)
                goto oom;
            msgs = nmsgs;
        }
        msgs[nm++] = (lq_chat_msg){"user", strdup(line)};
        /* Re-render the whole conversation and run it from a clean session: simple and always
         * consistent with the template (the KV cache is rebuilt each turn). */
        char *text = NULL;
        int32_t *ids = NULL;
        size_t n = 0;
        unsigned fl = (lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0) | LQ_TOK_PARSE_SPECIAL;
        if (lq_chat_format_render(fmt, msgs, nm, 1, NULL, &text, &err) ||
            lq_tokenizer_encode(tok, text, strlen(text), fl, &ids, &n, &err)) {
            free(text);
            lq_cli_error(C, "%s", err.msg);
            nm--;
            free((char *)msgs[nm].content);
            continue;
        }
        free(text);
        lq_session_reset(s);
        chat_reply reply = {0};
        lq_generate_result res = {0};
        int grc = lq_generate(s, ids, n, &g.gen, on_chat_token, &reply, &res, &err);
        free(ids);
        fputc('\n', stdout);
        fflush(stdout);
        if (grc) {
            lq_cli_error(C, "%s", err.msg);
            free(reply.text);
            nm--;
            free((char *)msgs[nm].content);
            if (grc == LQ_ECONTEXT)
                fprintf(stderr, "larql chat: the conversation no longer fits the context; /reset to start over\n");
            continue;
        }
        msgs[nm++] = (lq_chat_msg){"assistant", reply.text ? reply.text : strdup("")};
        if (tty)
            print_speed(&res);
    }
    rc = 0;
    goto out;
oom:
    lq_cli_error(C, "out of memory");
out:
    lq_chat_format_free(fmt);
    for (size_t k = 0; k < nm; k++)
        free((char *)msgs[k].content);
    free(msgs);
    free(line);
    lq_session_free(s);
    lq_cli_close_model(m, &g.model);
    return rc;
}
