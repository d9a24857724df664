"""Truncated and mangled variants of a sample, for the parsers' only-ever-ParseError tests."""

import random


def mangled(text: str, seed: str, count: int = 300) -> list[str]:
    """Every line-prefix of text, then `count` seeded mutations (1-6 characters deleted, replaced or inserted)."""
    lines = text.splitlines(keepends=True)
    candidates = ["".join(lines[:k]) for k in range(len(lines) + 1)]
    rng = random.Random(seed)
    for _ in range(count):
        chars = list(text)
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(len(chars))
            action = rng.choice(("delete", "replace", "insert"))
            if action == "delete":
                del chars[i]
            elif action == "replace":
                chars[i] = rng.choice("|/:= \n0x-abc")
            else:
                chars.insert(i, rng.choice("|/:= \n9"))
        candidates.append("".join(chars))
    return candidates
