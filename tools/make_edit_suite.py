#!/usr/bin/env python3
"""Writes the edit-evaluation suite of the trained model (tests/data/edits/trained.jsonl) from
its own fact templates (tools/train/facts.py): counterfactual edits of the facts it knows
(France -> capital -> Rome) and new entities with targets of one and several tokens. The
paraphrases and chat questions are not the phrasings an edit is written with ("The {r} of
{e} is", "{e}'s {r} is", "What is the {r} of {e}?"). Usage: make_edit_suite.py [--many N] > FILE

--many N writes N cases for a batch of many edits (eval-edits --together N): the suite's first
68 (half the countries' facts changed, every new entity) and then invented countries, each with
an invented capital and language, until N."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "train"))
from facts import COUNTRIES  # noqa: E402

PARA = {
    "capital": ["The capital city of {e} is", "{e} is a country. Its capital is", "In {e} the capital is",
                "Tom read a book about {e}. The capital is"],
    "language": ["In {e} people speak", "People in {e} speak", "{e} is a country. The people speak",
                 "The main language of {e} is"],
}
CHAT = {
    "capital": ["Which city is the capital of {e}?", "Tell me the capital of {e}."],
    "language": ["What language do people speak in {e}?", "Which language is spoken in {e}?"],
}
UNRELATED = ["Once upon a time, there was a little dog named Max.", "Lily liked to play in the park with her ball.",
             "The sun was warm and the birds sang in the trees."]
# new entities: (entity, capital, language); targets of one token and of several
NEW = [("Atlantis", "Poseidonia", "Atlantean"), ("Wakanda", "Birnin Zana", "Xhosa"), ("Narnia", "Cair Paravel", "Narnian"),
       ("Genovia", "Pyrus", "Genovian"), ("Latveria", "Doomstadt", "Latverian"), ("Freedonia", "Fredville", "Freedonian"),
       ("Zubrowka", "Lutz", "Zubrowkan"), ("Elbonia", "Mudville", "Elbonian"), ("Ruritania", "Strelsau", "Ruritanian"),
       ("Sokovia", "Novi Grad", "Sokovian"), ("Arendelle", "Paris", "Norwegian"), ("Florin", "Tokyo", "Florinese"),
       ("Agrabah", "Sultan City", "Agrabahn"), ("Lilliput", "Mildendo", "Lilliputian"), ("Oceania", "Airstrip One", "Newspeak"),
       ("Gondor", "Minas Tirith", "Westron"), ("Mordor", "Barad Dur", "Black Speech"), ("Rohan", "Edoras", "Rohirric"),
       ("Panem", "Capitol", "Panemese"), ("Westeros", "Kings Landing", "Common Tongue"), ("Kaledonia", "Rome", "Kaledonian"),
       ("Bravos", "Madrid", "Braavosi"), ("Qumar", "Cairo", "Qumari"), ("Markovia", "Oslo", "Markovian")]


def case(e, rel, target, old, neighbours):
    def fill(ts):
        return [t.format(e=e) for t in ts]
    c = {"edit": {"entity": e, "relation": rel, "target": target},
         "canonical": "The %s of %s is" % (rel, e),
         "paraphrases": fill(PARA[rel]), "chat": fill(CHAT[rel]),
         "neighbourhood": [{"prompt": "The %s of %s is" % (rel, n), "answer": a} for n, a in neighbours],
         "unrelated": UNRELATED}
    if old:
        c["old"] = old
    return c


SYL = ["ka", "lo", "mi", "ra", "ven", "dor", "sel", "tu", "bri", "nar", "zen", "qua", "fel", "mor", "tis", "lan",
       "gor", "pa", "ve", "shan"]


def invented(k):
    """The k-th invented country (three syllables and -ia), its capital and its language."""
    a, b, c = SYL[k % 20], SYL[(k // 20) % 20], SYL[(k // 400 + k) % 20]
    root = a + b + c
    return root.capitalize() + "ia", (c + a).capitalize() + " " + (b + "ton").capitalize(), root.capitalize() + "ic"


def many(out, count):
    n = len(COUNTRIES)
    k = 0
    while len(out) < count:
        e, cap, lang = invented(k)
        neigh = [(COUNTRIES[(k + j) % n][0], COUNTRIES[(k + j) % n][1]) for j in (3, 8, 14)]
        out.append(case(e, "capital" if k % 2 == 0 else "language", cap if k % 2 == 0 else lang, None, neigh))
        k += 1
    return out[:count]


def main():
    n = len(COUNTRIES)
    cap, lan, new = [], [], []
    for i, (e, c0, lang) in enumerate(COUNTRIES):
        # counterfactual capital: the capital of the country two places on
        other = COUNTRIES[(i + 2) % n]
        neigh = [(COUNTRIES[(i + k) % n][0], COUNTRIES[(i + k) % n][1]) for k in (5, 11, 17)]
        cap.append(case(e, "capital", other[1], c0, neigh))
        other_lang = next(c[2] for c in COUNTRIES[i + 1:] + COUNTRIES[:i] if c[2] != lang)
        neighl = [(COUNTRIES[(i + k) % n][0], COUNTRIES[(i + k) % n][2]) for k in (7, 13, 19)]
        lan.append(case(e, "language", other_lang, lang, neighl))
    for j, (e, c0, lang) in enumerate(NEW):
        neigh = [(COUNTRIES[(3 * j + k) % n][0], COUNTRIES[(3 * j + k) % n][1]) for k in (1, 9, 21)]
        new.append(case(e, "capital", c0, None, neigh))
        if j < 12:
            neighl = [(COUNTRIES[(3 * j + k) % n][0], COUNTRIES[(3 * j + k) % n][2]) for k in (2, 10, 22)]
            new.append(case(e, "language", lang, None, neighl))
    # the first 68 cases edit half the countries and every new entity, so that a batch of them
    # applied together (eval-edits --together 68) leaves 16 countries to be its neighbourhood
    out = cap[:16] + lan[:16] + new + cap[16:] + lan[16:]
    if len(sys.argv) == 3 and sys.argv[1] == "--many":
        out = many(out[:68], int(sys.argv[2]))
    elif len(sys.argv) > 1:
        raise SystemExit(__doc__)
    for c in out:
        sys.stdout.write(json.dumps(c, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
