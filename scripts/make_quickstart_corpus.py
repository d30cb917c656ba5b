#!/usr/bin/env python3
"""Writes configs/data/quickstart.txt: the quickstart's training text.

A small made-up language with structure a tiny byte-level GPT can learn in
a few hundred steps: spelling of a closed vocabulary, subject-verb number
agreement, adjective-noun order, prepositional phrases, and counting runs
("count: 3 4 5 6"). Deterministic (fixed seed), so the file in the
repository is exactly what this script writes.
"""
import random
import sys

NOUNS = ["cat", "dog", "bird", "frog", "goat", "owl", "bear", "duck", "hen", "pig", "lion", "snake"]
VERBS = ["see", "chase", "follow", "watch", "like", "help", "find", "hear"]
ADJECTIVES = ["big", "small", "red", "old", "young", "quick", "lazy", "happy"]
PLACES = ["in the park", "near the river", "under the tree", "on the hill", "by the barn"]


def noun_phrase(rng, plural):
    words = ["the"]
    if rng.random() < 0.5:
        words.append(rng.choice(ADJECTIVES))
    noun = rng.choice(NOUNS)
    words.append(noun + "s" if plural else noun)
    return " ".join(words)


def sentence(rng):
    kind = rng.random()
    if kind < 0.15:
        start = rng.randint(0, 5)
        return "count: " + " ".join(str(n) for n in range(start, start + rng.randint(3, 5))) + "."
    plural = rng.random() < 0.5
    verb = rng.choice(VERBS)
    verb = verb if plural else verb + ("es" if verb.endswith("ch") else "s")
    words = [noun_phrase(rng, plural), verb, noun_phrase(rng, rng.random() < 0.5)]
    if rng.random() < 0.4:
        words.append(rng.choice(PLACES))
    return " ".join(words) + "."


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "configs/data/quickstart.txt"
    rng = random.Random(2024)
    lines = []
    size = 0
    while size < 400_000:
        line = " ".join(sentence(rng) for _ in range(rng.randint(2, 4)))
        lines.append(line)
        size += len(line) + 1
    with open(out, "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
