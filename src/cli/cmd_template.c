/* larql chat-template: renders a Jinja chat template with variables from a JSON file, the
 * way a model's template is rendered for chat (the same interpreter). For checking a template
 * before serving it, and the tool the oracle test (tests/cli/chat_templates.sh) compares with
 * Python Jinja2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "larql/chat.h"

static const char *const TEMPLATE_USAGE =
    "usage: larql chat-template TEMPLATE.jinja VARS.json\n"
    "  Renders TEMPLATE with the variables of the JSON object in VARS (messages, bos_token,\n"
    "  eos_token, add_generation_prompt, tools ...) and writes the text to stdout as is.\n"
    "  '-' reads VARS from stdin.";

int lq_cli_chat_template(int argc, char **argv)
{
    const char *C = "chat-template";
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        puts(TEMPLATE_USAGE);
        return 0;
    }
    if (argc != 3)
        return lq_cli_usage(C, TEMPLATE_USAGE, "expected TEMPLATE and VARS");
    char *src = NULL, *vars = NULL, *out = NULL;
    size_t sn = 0, vn = 0, on = 0;
    int rc = 0;
    lq_jinja *t = NULL;
    lq_err err = {0};
    if (lq_read_file(argv[1], &src, &sn))
        rc = lq_cli_error(C, "cannot read template '%s'", argv[1]);
    else if (lq_read_file(argv[2], &vars, &vn))
        rc = lq_cli_error(C, "cannot read variables '%s'", argv[2]);
    else if (lq_jinja_parse(src, sn, &t, &err) || lq_jinja_render(t, vars, vn, &out, &on, &err))
        rc = lq_cli_error(C, "%s: %s", argv[1], err.msg);
    else if (fwrite(out, 1, on, stdout) != on || fflush(stdout))
        rc = lq_cli_error(C, "cannot write the output");
    lq_jinja_free(t);
    free(src);
    free(vars);
    free(out);
    return rc;
}
