#!/usr/bin/env python3
"""Oracle for larql's Jinja chat templates: renders every template in a directory with
Python Jinja2, configured as Hugging Face transformers configures it for chat templates
(ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls; tojson as
json.dumps with ensure_ascii=False; raise_exception and strftime_now globals), and with
`larql chat-template`, for a set of conversations, and compares the bytes.

usage: chat_templates_oracle.py LARQL TEMPLATE_DIR [--verbose]
Prints one line per mismatch and a summary; exits 1 if any case differs. A case where Jinja2
raises must make larql fail too (counted as "both refuse"); when the template itself raised
(raise_exception), larql's error must carry the same message."""
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


SYSTEM = {"role": "system", "content": "You are a helpful assistant"}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"}},
                   "required": ["city"]}}}]
MULTI = [SYSTEM, {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"},
         {"role": "user", "content": "Who are you"}, {"role": "assistant", "content": "   I am an assistant   "},
         {"role": "user", "content": "Another question"}]
CASES = [
    ("system+user", [SYSTEM, {"role": "user", "content": "What is 2+2?"}], True, None),
    ("system+user/nogen", [SYSTEM, {"role": "user", "content": "What is 2+2?"}], False, None),
    ("multi-turn", MULTI, True, None),
    ("multi-turn/nogen", MULTI, False, None),
    ("user-assistant", [{"role": "user", "content": "  Hi!\n"}, {"role": "assistant", "content": "Hello. \u00e9t\u00e9 \u2014 ok"},
                        {"role": "user", "content": "Tell me a \"quote\" and 'this'"}], True, None),
    ("tools", [{"role": "user", "content": "Weather in Paris?"}], True, TOOLS),
    ("tool-call", [{"role": "user", "content": "Weather in Paris?"},
                   {"role": "assistant", "content": "", "tool_calls": [
                       {"id": "call00001", "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                   {"role": "tool", "name": "get_weather", "tool_call_id": "call00001", "content": "{\"temp\": 21.5}"}],
     True, TOOLS),
    ("long", [SYSTEM] + [{"role": ("user", "assistant")[i % 2], "content": "turn %d: %s" % (i, "word " * i)}
                         for i in range(40)], True, None),
    ("content-parts", [{"role": "user", "content": [{"type": "text", "text": "Describe this."}]}], True, None),
]


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    larql, tdir = sys.argv[1], sys.argv[2]
    verbose = "--verbose" in sys.argv
    env = make_env()
    same = refused = differ = 0
    per_template = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(tdir)):
            if not name.endswith(".jinja"):
                continue
            path = os.path.join(tdir, name)
            src = open(path, encoding="utf-8").read()
            ok_t = 0
            for cname, msgs, agp, tools in CASES:
                ctx = {"messages": msgs, "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": agp}
                if tools is not None:
                    ctx["tools"] = tools
                raised = None
                try:
                    want = env.from_string(src).render(**ctx).encode("utf-8")
                    py_err = None
                except Exception as e:  # any refusal: the template's own or Jinja2's
                    want, py_err = None, "%s: %s" % (type(e).__name__, e)
                    if type(e) is jinja2.exceptions.TemplateError:  # raise_exception(message)
                        raised = str(e)
                vpath = os.path.join(tmp, "vars.json")
                with open(vpath, "w", encoding="utf-8") as f:
                    json.dump(ctx, f, ensure_ascii=False)
                r = subprocess.run([larql, "chat-template", path, vpath], capture_output=True)
                # the template's own raise_exception must be ours too, with its message
                if raised is not None and ("raised an exception: " + raised).encode() not in r.stderr:
                    differ += 1
                    print("DIFFER %s [%s]: jinja2 raised %r, larql: %r" % (name, cname, raised, r.stderr[:300]))
                elif want is None and r.returncode != 0:
                    refused += 1
                    ok_t += 1
                    if verbose:
                        print("both refuse  %s [%s]: py %s | larql %s" % (name, cname, py_err,
                                                                       r.stderr.decode(errors="replace").strip()))
                elif want is not None and r.returncode == 0 and r.stdout == want:
                    same += 1
                    ok_t += 1
                else:
                    differ += 1
                    print("DIFFER %s [%s]" % (name, cname))
                    print("   jinja2: %r" % (want[:300] if want is not None else py_err))
                    print("   larql:  %r" % (r.stdout[:300] if r.returncode == 0 else r.stderr.decode(errors="replace").strip()))
            per_template[name] = ok_t
    total = same + refused + differ
    full = sum(1 for v in per_template.values() if v == len(CASES))
    print("templates: %d, all %d cases agree for %d" % (len(per_template), len(CASES), full))
    print("cases: %d, byte-identical %d, both refuse %d, differ %d" % (total, same, refused, differ))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
