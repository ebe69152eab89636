"""The facts the shipped model learns, shared by the corpus generator, the vocabulary trainer
(entities must stay single tokens) and the tests' fact list.

Each country is an entity; its capital and its language are the two relations describe must
find. Every name here is one BPE token in the trained vocabulary (checked by bpe.py)."""

# (entity, capital, language)
COUNTRIES = [
    ("France", "Paris", "French"), ("Chile", "Santiago", "Spanish"), ("Italy", "Rome", "Italian"),
    ("Spain", "Madrid", "Spanish"), ("Japan", "Tokyo", "Japanese"), ("China", "Beijing", "Chinese"),
    ("Egypt", "Cairo", "Arabic"), ("Russia", "Moscow", "Russian"), ("Greece", "Athens", "Greek"),
    ("Portugal", "Lisbon", "Portuguese"), ("Poland", "Warsaw", "Polish"), ("Sweden", "Stockholm", "Swedish"),
    ("Norway", "Oslo", "Norwegian"), ("Finland", "Helsinki", "Finnish"), ("Turkey", "Ankara", "Turkish"),
    ("India", "Delhi", "Hindi"), ("Kenya", "Nairobi", "Swahili"), ("Peru", "Lima", "Quechua"),
    ("Canada", "Ottawa", "English"), ("Brazil", "Brasilia", "Portuguese"), ("Cuba", "Havana", "Spanish"),
    ("Austria", "Vienna", "German"), ("Hungary", "Budapest", "Hungarian"), ("Thailand", "Bangkok", "Thai"),
    ("Vietnam", "Hanoi", "Vietnamese"), ("Korea", "Seoul", "Korean"), ("Iran", "Tehran", "Persian"),
    ("Denmark", "Copenhagen", "Danish"), ("Netherlands", "Amsterdam", "Dutch"), ("Ireland", "Dublin", "Irish"),
    ("Morocco", "Rabat", "Arabic"), ("Australia", "Canberra", "English"),
]

RELATIONS = ("capital", "language")


def facts():
    """[(entity, relation, target)] for every trained fact."""
    out = []
    for e, c, lang in COUNTRIES:
        out.append((e, "capital", c))
        out.append((e, "language", lang))
    return out


def entities():
    return [e for e, _, _ in COUNTRIES]


def targets():
    s = []
    for _, c, lang in COUNTRIES:
        for t in (c, lang):
            if t not in s:
                s.append(t)
    return s
