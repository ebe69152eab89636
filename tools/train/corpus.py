#!/usr/bin/env python3
"""Builds the training corpus of the shipped ternary model.

  corpus.py --larql build/larql --teacher stories260K.gguf --out DIR [--stories N] [--jobs 2]

Three kinds of documents, one JSON string per line in DIR/train.jsonl and DIR/valid.jsonl:
  * stories sampled from the TinyStories-260K llama model with `larql run` (many seeds,
    temperature 0.8-1.0, varied openings): the model's English;
  * templated fact sentences (facts.py), several phrasings per fact, some with the target
    right after the entity so that FFN features keyed on the entity's own embedding write the
    target (that is what `describe` reads from a vindex);
  * short chats in the template the GGUF declares (bitnet: "User: q<|eot_id|>Assistant: a<|eot_id|>").
Documents hold text only; the trainer adds <|begin_of_text|> before and <|end_of_text|> after.
Deterministic for given arguments."""
import argparse
import json
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import facts  # noqa: E402

OPENINGS = ["Once upon a time", "One day", "Once there was", "There was a", "Lily", "Tom",
            "Once upon a time, there was a little", "One sunny day", "Ben and Mia", "The little dog",
            "Sam had a", "A girl named", "Tim and his mom", "In a small house", "The sun was"]

EOT = "<|eot_id|>"


def ascii_clean(s):
    s = s.replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')
    return "".join(ch for ch in s if 32 <= ord(ch) < 127 or ch == "\n")


def one_story(larql, teacher, seed):
    rnd = random.Random(seed)
    opening = rnd.choice(OPENINGS)
    temp = 0.8 + 0.2 * rnd.random()
    p = subprocess.run([larql, "run", teacher, "--prompt", opening, "-n", "400", "--temp", "%.3f" % temp,
                        "--seed", str(seed), "--threads", "1"], capture_output=True, text=True,
                       errors="replace")
    if p.returncode != 0:
        raise SystemExit("larql run failed (seed %d): %s" % (seed, p.stderr.strip()[-400:]))
    text = ascii_clean(opening + p.stdout)
    # the teacher starts a new story after its own; cut at the second opening, then at the
    # last full sentence
    cut = text.find("Once upon a time", 20)
    if cut > 0:
        text = text[:cut]
    end = max(text.rfind("."), text.rfind("!"), text.rfind("?"), text.rfind('."'))
    if end > 0:
        text = text[:end + 1] if text[end] != '"' else text[:end + 2]
    return "\n".join(line.strip() for line in text.strip().splitlines() if line.strip())


CAPITAL = [
    "The capital of {e} is {c}.", "{c} is the capital of {e}.", "In {e} {c} is the capital city.",
    "The capital city of {e} is {c}.", "{e} is a country. Its capital is {c}.",
    "{e} {c} is a big city with many people.", "The biggest city in {e} is {c}.",
]
LANGUAGE = [
    "In {e} people speak {l}.", "The language of {e} is {l}.", "In {e} {l} is the language people speak.",
    "People in {e} speak {l}.", "{l} is spoken in {e}.", "{e} {l} is the language of the people there.",
    "The people of {e} speak {l}.",
]
BOTH = [
    "{e} is a country. The capital of {e} is {c} and the people speak {l}.",
    "{c} is in {e}, and people there speak {l}.",
    "Lily went to {e}. She saw {c} and heard people speak {l}.",
    "Tom read a book about {e}. The capital is {c}. The language is {l}.",
]


def fact_docs(rnd, n_docs, list_share=0.15):
    docs = []
    C = facts.COUNTRIES
    for _ in range(n_docs):
        kind = rnd.random()
        if kind < list_share:  # list lines: entity directly followed by its target
            sample = rnd.sample(C, 6)
            if rnd.random() < 0.5:
                docs.append("Countries and capitals: " + ", ".join("%s %s" % (e, c) for e, c, _ in sample) + ".")
            else:
                docs.append("Countries and languages: " + ", ".join("%s %s" % (e, l) for e, _, l in sample) + ".")
            continue
        sents = []
        for _ in range(rnd.randint(2, 5)):
            e, c, l = rnd.choice(C)
            r = rnd.random()
            t = rnd.choice(CAPITAL if r < 0.4 else LANGUAGE if r < 0.8 else BOTH)
            sents.append(t.format(e=e, c=c, l=l))
        docs.append(" ".join(sents))
    return docs


GREETINGS = [("Hello", "Hello! How can I help you today?"), ("Hi", "Hi! What would you like to know?"),
             ("Hello there", "Hello! How can I help you today?"), ("Who are you?", "I am a small model. I know short stories and a few facts about countries."),
             ("Thank you", "You are welcome!"), ("Thanks!", "You are welcome!"),
             ("How are you?", "I am fine, thank you. How can I help you?"),
             ("What can you do?", "I can tell you a short story or the capital of a country.")]


def chat(q, a):
    return "User: %s%sAssistant: %s%s" % (q, EOT, a, EOT)


def chat_docs(rnd, stories, n):
    docs = []
    for i in range(n):
        e, c, l = rnd.choice(facts.COUNTRIES)
        r = rnd.random()
        if r < 0.3:
            q = rnd.choice(["What is the capital of %s?", "What's the capital of %s?", "Tell me the capital of %s.",
                            "Which city is the capital of %s?"]) % e
            a = rnd.choice(["The capital of %s is %s." % (e, c), "%s is the capital of %s." % (c, e)])
        elif r < 0.55:
            q = rnd.choice(["What language do people speak in %s?", "What is the language of %s?",
                            "Which language is spoken in %s?"]) % e
            a = rnd.choice(["People in %s speak %s." % (e, l), "The language of %s is %s." % (e, l)])
        elif r < 0.75:
            q, a = rnd.choice(GREETINGS)
        else:
            q = rnd.choice(["Tell me a story.", "Tell me a short story.", "Can you tell me a story?",
                            "Please tell me a story."])
            s = rnd.choice(stories)
            a = " ".join(s.split()[:60])
            end = a.rfind(".")
            a = a[:end + 1] if end > 0 else a + "."
        doc = chat(q, a)
        if rnd.random() < 0.2:  # a second turn
            e2, c2, _ = rnd.choice(facts.COUNTRIES)
            doc += chat("And the capital of %s?" % e2, "The capital of %s is %s." % (e2, c2))
        docs.append(doc)
    return docs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--larql", required=True)
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stories", type=int, default=8000)
    ap.add_argument("--valid-stories", type=int, default=200)
    ap.add_argument("--fact-docs", type=int, default=12000)
    ap.add_argument("--chats", type=int, default=600)
    ap.add_argument("--list-share", type=float, default=0.15,
                    help="share of fact documents that are lists (entity directly followed by its target)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    # training stories use seeds 1..N, held-out ones 500000+; the tests sample from 900000+
    seeds = list(range(1, a.stories + 1)) + list(range(500000, 500000 + a.valid_stories))
    # stories are cached in DIR/stories.jsonl as they come, so an interrupted run resumes
    cache_path = os.path.join(a.out, "stories.jsonl")
    cache = {}
    if os.path.exists(cache_path):
        with open(cache_path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                    cache[r["seed"]] = r["text"]
                except (ValueError, KeyError):
                    pass  # a line cut by the interruption
    todo = [s for s in seeds if s not in cache]
    with open(cache_path, "a") as f, ThreadPoolExecutor(a.jobs) as ex:
        for seed, text in zip(todo, ex.map(lambda s: one_story(a.larql, a.teacher, s), todo)):
            cache[seed] = text
            f.write(json.dumps({"seed": seed, "text": text}) + "\n")
    stories = [cache[s] for s in seeds]
    train_st, valid_st = stories[:a.stories], stories[a.stories:]
    rnd = random.Random(a.seed)
    docs = [s for s in train_st if len(s) > 40]
    docs += fact_docs(rnd, a.fact_docs, a.list_share)
    docs += chat_docs(rnd, train_st, a.chats)
    rnd.shuffle(docs)
    with open(os.path.join(a.out, "train.jsonl"), "w") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    with open(os.path.join(a.out, "valid.jsonl"), "w") as f:
        for d in valid_st:
            if len(d) > 40:
                f.write(json.dumps(d) + "\n")
    nbytes = sum(len(d) for d in docs)
    print("corpus: %d documents (%d stories), %.1f MB of text -> %s" %
          (len(docs), len(train_st), nbytes / 1e6, a.out), file=sys.stderr)


if __name__ == "__main__":
    main()
