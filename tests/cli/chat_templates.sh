#!/bin/sh
# Chat templates from the model file: the Jinja interpreter against Python Jinja2 (the
# oracle, tests/chat_templates_oracle.py, configured as transformers renders chat templates)
# on every template in tests/data/chat_templates/ with several conversations, byte for byte;
# the trained model's own template rendering as the built-in bitnet format; and the
# --chat-template / chat-template errors (run, chat, serve and its chat route). The oracle
# part skips without python3-jinja2.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TPL="$ROOT/tests/data/chat_templates"
M="$ROOT/models/tinystories-ternary.gguf"

if python3 -c 'import jinja2' 2>/dev/null; then
    if python3 "$ROOT/tests/chat_templates_oracle.py" "$LARQL" "$TPL" >"$T_TMP/oracle" 2>&1; then
        pass "every template renders byte-identical to Jinja2 ($(tail -n 1 "$T_TMP/oracle"))"
    else
        fail "every template renders byte-identical to Jinja2" "$(head -c 1500 "$T_TMP/oracle")"
    fi
else
    skip "every template renders byte-identical to Jinja2" "python3-jinja2 not installed"
fi

# larql chat-template: errors name the template line
printf '{"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true}' >"$T_TMP/v.json"
printf 'a\n{{ x | frobnicate }}' >"$T_TMP/f.jinja"
check_fails "unknown filter names its line" "line 2: unknown filter 'frobnicate'" "$LARQL" chat-template "$T_TMP/f.jinja" "$T_TMP/v.json"
printf '{%% for m in messages %%}\n{{ m.content }}' >"$T_TMP/u.jinja"
check_fails "unclosed block names its line" "line 1: block opened here is never closed" "$LARQL" chat-template "$T_TMP/u.jinja" "$T_TMP/v.json"
printf '{{ raise_exception("Only user roles") }}' >"$T_TMP/r.jinja"
check_fails "raise_exception is an error with its message" "raised an exception: Only user roles" "$LARQL" chat-template "$T_TMP/r.jinja" "$T_TMP/v.json"
printf '{%% for i in range(1000000) %%}{%% for j in range(1000000) %%}{%% endfor %%}{%% endfor %%}' >"$T_TMP/l.jinja"
check_fails "a runaway loop stops at the step bound" "steps" "$LARQL" chat-template "$T_TMP/l.jinja" "$T_TMP/v.json"
check_fails "variables that are not JSON" "not JSON" "$LARQL" chat-template "$TPL/chatml.jinja" "$T_TMP/f.jinja"
check_fails "a missing template file" "cannot read template" "$LARQL" chat-template "$T_TMP/nope.jinja" "$T_TMP/v.json"
check "chat-template renders ChatML" "$LARQL" chat-template "$TPL/chatml.jinja" "$T_TMP/v.json"
if [ "$(cat "$T_TMP/out")" = "$(printf '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant')" ]; then
    pass "ChatML output"
else
    fail "ChatML output" "$(cat "$T_TMP/out")"
fi

if [ -f "$M" ]; then
    # the shipped model carries a template equivalent to the built-in bitnet format: the
    # answer rendered from the file must equal the built-in one
    "$LARQL" run "$M" --chat --prompt "The capital of France is" -n 12 --temp 0 >"$T_TMP/own" 2>/dev/null
    "$LARQL" run "$M" --chat --prompt "The capital of France is" -n 12 --temp 0 --chat-template bitnet >"$T_TMP/bi" 2>/dev/null
    if [ -s "$T_TMP/own" ] && cmp -s "$T_TMP/own" "$T_TMP/bi"; then pass "the file's template answers as the built-in bitnet format"; else fail "the file's template answers as the built-in bitnet format" "$(cat "$T_TMP/own") vs $(cat "$T_TMP/bi")"; fi
    check "run --chat --chat-template FILE" "$LARQL" run "$M" --chat --prompt hi -n 2 --chat-template "$TPL/chatml.jinja"
    check_fails "--chat-template: a missing file" "is not plain, llama3, bitnet or a readable template file" "$LARQL" run "$M" --chat --prompt hi -n 2 --chat-template "$T_TMP/nope.jinja"
    check_fails "--chat-template: a template that does not parse" "line 1: block opened here is never closed" "$LARQL" run "$M" --chat --prompt hi -n 2 --chat-template "$T_TMP/u.jinja"
    # chat reports a turn that cannot render and goes on reading (interactive)
    echo hi | "$LARQL" chat "$M" -n 2 --chat-template "$T_TMP/r.jinja" >/dev/null 2>"$T_TMP/err"
    if grep -q "raised an exception: Only user roles" "$T_TMP/err"; then pass "chat: a template that raises is reported"; else fail "chat: a template that raises is reported" "$(cat "$T_TMP/err")"; fi
    check_fails "serve --chat-template: a template that does not parse" "never closed" "$LARQL" serve "$M" --port 0 --chat-template "$T_TMP/u.jinja"
    # the server renders with --chat-template: a template that raises is the request's 400
    if start_server raising "$M" --chat-template "$T_TMP/r.jinja"; then
        code=$(curl -s -o "$T_TMP/chat.json" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/chat/completions" \
            -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}')
        if [ "$code" = 400 ] && grep -q "raised an exception: Only user roles" "$T_TMP/chat.json"; then
            pass "serve --chat-template: the template's raise_exception is a 400 with its message"
        else
            fail "serve --chat-template: the template's raise_exception is a 400 with its message" "$code $(head -c 300 "$T_TMP/chat.json")"
        fi
    else
        fail "larql serve --chat-template starts"
    fi
else
    skip "the file's template answers as the built-in bitnet format" "models/tinystories-ternary.gguf absent"
fi
done_tests
