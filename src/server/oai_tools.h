/* OpenAI function calling for routes_openai.c: `tools` and `tool_choice` become a grammar
 * that forces {"name": ..., "arguments": {...}} JSON (the arguments following the
 * function's parameters schema) and a system message describing the functions; assistant
 * `tool_calls` and `tool` messages in the history become plain text for the chat template;
 * a generated call becomes the reply's `tool_calls`. Not a public header. */
#ifndef LQ_SERVER_OAI_TOOLS_H
#define LQ_SERVER_OAI_TOOLS_H

#include <jansson.h>

#include "server/internal.h"

enum {
    TOOLS_NONE = 0,     /* no tools, or tool_choice "none": plain text */
    TOOLS_AUTO = 1,     /* text, or a call (an output that starts with '{') */
    TOOLS_REQUIRED = 2, /* "required" or a named function: exactly one call */
};

typedef struct oai_tools {
    int mode;
    char *gbnf;   /* the grammar (TOOLS_AUTO / TOOLS_REQUIRED) */
    char *system; /* the functions described for the prompt */
} oai_tools;

/* Reads tools, tool_choice and parallel_tool_calls. Returns 0 (mode TOOLS_NONE when the
 * request has no tools), or -1 with r filled (a malformed tool or schema, tool_choice naming
 * an unknown function). */
int oai_tools_parse(json_t *j, oai_tools *t, reply *r);
void oai_tools_free(oai_tools *t);

/* The text a history message stands for: an assistant message's content followed by its
 * tool_calls as the JSON the model would have written; a tool message as its result.
 * *role is set to the role to render it with. NULL with r filled on a malformed message. */
char *oai_tool_history(json_t *msg, size_t i, const char **role, reply *r);

/* Generated calls (one JSON object per line) -> the `tool_calls` array ([{id, type,
 * function: {name, arguments}}]), or NULL when text is not a sequence of complete calls. */
json_t *oai_tool_calls(const char *text, size_t len);

#endif
