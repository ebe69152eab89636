#!/usr/bin/env python3
"""The prompt cache across turns and across restarts.
Next turn: a chat client sends the answer back as text, which may tokenize differently from the
tokens generated; the server prefills that text's tokens into the cache after the answer
(warm_tokens in /v1/runtime), so the next turn reuses the prompt and the answer and answers as
with cache_prompt false, streamed or not.
Slots (--slot-save-path): POST /slots/0?action=save writes the last conversation's cache entry,
a restarted server restores it and the next turn reuses it and answers the same; bad ids,
names, actions, files and another model's file are refused.
usage: slots.py PORT MODE [DIR]   MODE: turns | save | restore | foreign | off"""
import json
import os
import sys
import urllib.request

import client
from tap import ok

PORT, MODE = int(sys.argv[1]), sys.argv[2]
DIR = sys.argv[3] if len(sys.argv) > 3 else ""


def call(method, path, body=None):
    return client.call(PORT, method, path, body)


def cache():
    return call("GET", "/v1/runtime")[1].get("prompt_cache", {})


def complete(prompt, stream=False, **kw):
    body = {"prompt": prompt, "max_tokens": 12, "temperature": 0, "stream": stream}
    body.update(kw)
    if not stream:
        st, b = call("POST", "/v1/completions", body)
        return b["choices"][0]["text"] if st == 200 else None
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % PORT, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    text = ""
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            line = line.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                ch = json.loads(line[6:]).get("choices") or []
                if ch and ch[0].get("text"):
                    text += ch[0]["text"]
    return text


LINES = ["User: Tell me about the cat on the mat.\nAssistant:", "\nUser: And what did the dog do then?\nAssistant:",
         "\nUser: Where did they go in the evening?\nAssistant:"]


def conversation(stream, turns=3):
    conv, answers, reuse = "", [], []
    for t in range(turns):
        conv += LINES[t]
        c0 = cache()
        answers.append(complete(conv, stream))
        c1 = cache()
        reuse.append(c1.get("reused_tokens", 0) - c0.get("reused_tokens", 0))
        conv += answers[-1]
    return conv, answers, reuse


def prompt_tokens(text):
    st, b = call("POST", "/v1/completions", {"prompt": text, "max_tokens": 1, "cache_prompt": False})
    return b["usage"]["prompt_tokens"]


if MODE == "turns":
    for stream in (False, True):
        w0 = cache().get("warm_tokens", 0)
        conv, answers, reuse = conversation(stream)
        ref = []
        c = ""
        for t in range(3):
            c += LINES[t]
            ref.append(complete(c, stream, cache_prompt=False))
            c += ref[-1]
        ok("stream %s: every turn answers as with cache_prompt false" % stream, None not in answers and answers == ref,
           (answers, ref))
        # turn 3 reuses everything before its new line: turn 2's prompt and answer as text
        before = prompt_tokens(conv[:len(conv) - len(answers[2]) - len(LINES[2])])
        ok("stream %s: turn 3 reuses turn 2's prompt and its answer, tokenized as sent (all but the last token)"
           % stream, reuse[2] >= before - 1, (reuse, before))
        ok("stream %s: the answers' tokens were prefilled into the cache after each turn" % stream,
           cache().get("warm_tokens", 0) > w0, cache())
elif MODE == "save":
    conv, answers, _ = conversation(False, 2)
    st, b = call("POST", "/slots/0?action=save", {"filename": "chat.bin"})
    ok("save slot 0: 200 with n_saved and n_written", st == 200 and b.get("n_saved", 0) > 10 and
       b.get("n_written", 0) > b.get("n_saved", 0) and b.get("filename") == "chat.bin" and
       "save_ms" in b.get("timings", {}), b)
    ok("... the file is in --slot-save-path", os.path.getsize(os.path.join(DIR, "chat.bin")) == b.get("n_written"))
    with open(os.path.join(DIR, "conv.json"), "w") as f:
        json.dump({"conv": conv, "n": b.get("n_saved")}, f)
    st, b = call("POST", "/slots/5?action=save", {"filename": "x.bin"})
    ok("an empty slot: 404", st == 404 and "slot 5" in b["error"]["message"], b)
    for name in ("../x.bin", "a/b.bin", "..", ".hidden", "", "x" * 300, "bad name.bin"):
        st, b = call("POST", "/slots/0?action=save", {"filename": name})
        ok("filename %r refused (400)" % name[:20], st == 400 and b["error"].get("param") == "filename", b)
    st, b = call("POST", "/slots/0?action=save", {})
    ok("no filename: 400", st == 400, b)
    st, b = call("POST", "/slots/0?action=save", {"filename": 7})
    ok("a filename that is not a string: 400", st == 400, b)
    for path in ("/slots/x?action=save", "/slots/-1?action=save", "/slots/99999999?action=save"):
        st, b = call("POST", path, {"filename": "x.bin"})
        ok("%s: 400" % path, st == 400 and b["error"].get("param") == "id_slot", b)
    st, b = call("POST", "/slots/0?action=delete", {"filename": "x.bin"})
    ok("unknown action: 400", st == 400 and b["error"].get("param") == "action", b)
    st, b = call("POST", "/slots/0", {"filename": "x.bin"})
    ok("no action: 400", st == 400, b)
    st, b = call("POST", "/slots/0?action=save", None)
    ok("no body: 400", st == 400, b)
elif MODE == "restore":
    with open(os.path.join(DIR, "conv.json")) as f:
        saved = json.load(f)
    for name, want in (("none.bin", 404), ("short.bin", 400), ("corrupt.bin", 400), ("junk.bin", 400)):
        st, b = call("POST", "/slots/0?action=restore", {"filename": name})
        ok("restore %s: %d" % (name, want), st == want, b)
    st, b = call("POST", "/slots/3?action=restore", {"filename": "chat.bin"})
    ok("restore: 200 with n_restored, n_read, the id echoed", st == 200 and b.get("n_restored") == saved["n"] and
       b.get("id_slot") == 3 and b.get("n_read", 0) > 0, b)
    conv = saved["conv"] + "\nUser: And then?\nAssistant:"
    c0 = cache()
    t = complete(conv)
    c1 = cache()
    ok("the next turn after a restart reuses the restored prompt",
       c1.get("reused_tokens", 0) - c0.get("reused_tokens", 0) >= saved["n"] - 12, (c0, c1, saved["n"]))
    ok("... and answers as with cache_prompt false", t is not None and t == complete(conv, cache_prompt=False))
    # erase (llama-server's action=erase, no body): the newest entry goes, its tokens prefilled again
    e0 = cache().get("entries", 0)
    st, b = call("POST", "/slots/0?action=erase")
    ok("erase slot 0: 200 with n_erased and the id", st == 200 and b.get("id_slot") == 0 and
       b.get("n_erased", 0) >= saved["n"], b)
    ok("... one entry fewer in the cache", cache().get("entries", 0) == e0 - 1, (e0, cache()))
    st, b = call("POST", "/slots/40?action=erase")
    ok("erase an empty slot: 404 naming it", st == 404 and "slot 40" in b["error"]["message"] and
       b["error"].get("param") == "id_slot", b)
    st, b = call("POST", "/slots/x?action=erase")
    ok("erase slot x: 400", st == 400 and b["error"].get("param") == "id_slot", b)
elif MODE == "foreign":
    st, b = call("POST", "/slots/0?action=restore", {"filename": "chat.bin"})
    ok("another model's file: 400 naming it", st == 400 and "model" in b["error"]["message"], b)
elif MODE == "off":
    st, b = call("POST", "/slots/0?action=save", {"filename": "x.bin"})
    ok("without --slot-save-path: 501", st == 501 and "--slot-save-path" in b["error"]["message"], b)
    complete("Once upon a time there was a cat named Tom who liked to sleep in the sun.")
    st, b = call("POST", "/slots/0?action=erase")
    ok("erase needs no --slot-save-path: 200", st == 200 and b.get("n_erased", 0) > 8, b)
