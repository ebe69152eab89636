/* larql: entry point and subcommand table. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

/* Plain (strong) references: a subcommand whose file is missing fails the link. */
static const struct {
    const char *name;
    lq_cli_fn fn;
    const char *help;
} commands[] = {
    {"info", lq_cli_info, "MODEL                      architecture, shapes, tensor types, memory"},
    {"logits", lq_cli_logits, "MODEL --ids 1,2,3 [--top K] next-token logits per position (JSON lines)"},
    {"perplexity", lq_cli_perplexity, "MODEL --file TEXT [--ctx N] [--json] perplexity and bits per byte"},
    {"run", lq_cli_run, "MODEL [PROMPT] [-n N]        stream a continuation (no PROMPT: chat)"},
    {"chat", lq_cli_chat, "MODEL                      interactive chat with the model's template"},
    {"chat-template", lq_cli_chat_template, "TEMPLATE VARS.json      render a Jinja chat template (as chat does)"},
    {"tokenize", lq_cli_tokenize, "SOURCE TEXT [--special]  text -> ids (JSON)"},
    {"detokenize", lq_cli_detokenize, "SOURCE 1,2,3            ids -> text (JSON)"},
    {"make-model", lq_cli_make_model, "--out FILE [--preset tiny|demo|2b|3b|8b] random BitNet GGUF fixture"},
    {"convert", lq_cli_convert, "gguf-to-vindex|safetensors-to-gguf|safetensors-to-vindex IN --output OUT"},
    {"extract-index", lq_cli_extract_index, "HF_DIR -o DIR [--level ...]  LARQL's name: HF folder -> vindex"},
    {"describe", lq_cli_describe, "DIR ENTITY [--band B] [--limit N] what the model knows about ENTITY"},
    {"walk", lq_cli_walk, "DIR PROMPT [--top N] [--layers a-b] FFN features a prompt fires"},
    {"select", lq_cli_select, "DIR [--entity E] [--relation R] [--layer L] query feature edges"},
    {"relations", lq_cli_relations, "DIR                        relation labels and counts"},
    {"nearest", lq_cli_nearest, "DIR ENTITY --layer L       nearest gate features of an entity"},
    {"similar", lq_cli_similar, "DIR A B                     similarity of two entities"},
    {"verify", lq_cli_verify, "DIR                        check a vindex's files against index.json's sha256"},
    {"slice", lq_cli_slice, "SRC -o DST --parts a,b | --preset P  a vindex of some parts of another"},
    {"diag", lq_cli_diag, "DIR [--probe]               engine diagnostic: files, loader, kernels"},
    {"list", lq_cli_list, "                            the cached vindexes (local registry, hub cache)"},
    {"link", lq_cli_link, "PATH [--as NAME] [--force]  register a vindex in the local registry"},
    {"rm", lq_cli_rm, "MODEL [--yes]               remove a cached vindex (a link: the link only)"},
    {"hf", lq_cli_hf, "...                         LARQL's hub commands: need the network (an error)"},
    {"pull", lq_cli_pull, "hf://owner/name             needs the network (an error)"},
    {"publish", lq_cli_publish, "DIR owner/name              needs the network (an error)"},
    {"stats", lq_cli_stats, "DIR                        vindex statistics"},
    {"show", lq_cli_show, "DIR layers|features         vindex layout"},
    {"infer", lq_cli_infer, "DIR PROMPT [--top 5] [--mode walk|dense|compare] next-token predictions"},
    {"eval-edits", lq_cli_eval_edits, "DIR --suite FILE [--together N] how well edits are read back"},
    {"lql", lq_cli_lql, "[DIR] ['STMTS' | -c STMTS | -f FILE] LQL: a batch of statements or the shell"},
    {"repl", lq_cli_repl, "[DIR]                     the LQL shell"},
    {"journal", lq_cli_journal, "check|salvage FILE [--output OUT] inspect or recover an edit journal"},
    {"serve", lq_cli_serve, "MODEL [--port 8080] ...     HTTP server: LARQL API + OpenAI API"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: larql <command> [args]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'larql <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "larql: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
