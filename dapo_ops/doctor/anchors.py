"""Which lines of a large log can match a signature at all, found without reading the log line by line.

Every signature's match rule implies literals of which each matching line holds at least one: a substring group's
longest part, or, for a regex, the literal runs its parse tree requires (one per alternative). Searching the whole
text for those literals with `bytes.find` runs in C at gigabytes a second; only the lines found are parsed and
matched in Python. A regex that requires no literal (or ignores case) is run over the whole text instead. Finding
a line here is necessary, not sufficient: the signature itself still decides (signatures.Catalog.match).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from re import _constants as sre_constants  # the parse tree's opcodes (Lib/re/_constants.py)
from re import _parser as sre_parser        # the same parser `re.compile` uses (Lib/re/_parser.py)

from dapo_ops.doctor.signatures import Catalog, Match

MIN_LITERAL = 3      # a shorter literal is in nearly every line: the regex is run instead
# a regex's zero-width assertions at its ends (`^`, `\b`, a lookbehind; `$`, `\Z`), kept out of the whole-text search:
# they hold in the cleaned line (after a Ray prefix, before a CR or a `[repeated]` tail) but not always in the raw
# text, and without a leading one Python's engine finds the literal that follows at memchr speed; dropping them only
# widens the search. Global inline flags such as `(?i)` stay in front.
GLOBAL_FLAGS = re.compile(r"^\(\?[aiLmsux]+\)")
LEADING_ASSERTIONS = re.compile(r"^(?:\^|\\[bA]|\(\?<?[=!](?:[^()\\]|\\.)*\))+")
TRAILING_ASSERTIONS = re.compile(r"(?<!\\)(?:\$|\\[bZ])+$")
_REPEATS = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT)
_GROUPS = (sre_constants.SUBPATTERN, sre_constants.ATOMIC_GROUP)


def _sequence_literals(items) -> frozenset[str] | None:
    """Literals one of which every match of this sequence holds (the option whose shortest literal is longest),
    or None when the sequence requires none."""
    options: list[frozenset[str]] = []
    run: list[str] = []
    for op, value in items:
        if op is sre_constants.LITERAL:
            run.append(chr(value))
            continue
        if run:
            options.append(frozenset(["".join(run)]))
            run = []
        required = None
        if op is sre_constants.SUBPATTERN and not (value[1] & re.IGNORECASE):
            required = _sequence_literals(value[3])
        elif op is sre_constants.ATOMIC_GROUP:
            required = _sequence_literals(value)
        elif op is sre_constants.BRANCH:
            branches = [_sequence_literals(branch) for branch in value[1]]
            required = None if any(b is None for b in branches) else frozenset().union(*branches)
        elif op in _REPEATS and value[0] >= 1:
            required = _sequence_literals(value[2])
        if required:
            options.append(required)
    if run:
        options.append(frozenset(["".join(run)]))
    best = max(options, key=lambda option: min(map(len, option)), default=None)
    return best if best and min(map(len, best)) >= MIN_LITERAL else None


def required_literals(pattern: re.Pattern) -> frozenset[str] | None:
    """Literals one of which every match of the regex holds; None when it ignores case or requires none."""
    if pattern.flags & re.IGNORECASE:
        return None
    parsed = sre_parser.parse(pattern.pattern, pattern.flags)
    if parsed.state.flags & re.IGNORECASE:      # an inline (?i)
        return None
    return _sequence_literals(parsed)


def _match_literals(match: Match) -> frozenset[str] | None:
    if match.regex is not None:
        return required_literals(match.regex)
    return frozenset(max(group, key=len) for group in match.groups)


def _search_regex(regex: re.Pattern) -> re.Pattern | None:
    """The regex as a byte pattern for the whole text, or None when it has none (a non-ASCII escape, `(?u)`): then
    every line is a candidate. Byte classes are ASCII: `\\d` finds no non-ASCII digit that the str pattern would."""
    flags = regex.flags & ~re.UNICODE
    pattern = regex.pattern
    flags_group = GLOBAL_FLAGS.match(pattern)
    head = flags_group.group(0) if flags_group else ""
    widened = head + TRAILING_ASSERTIONS.sub("", LEADING_ASSERTIONS.sub("", pattern[len(head):]))
    for candidate in (widened, pattern):
        try:
            return re.compile(candidate.encode(), flags)
        except re.error:
            continue
    return None


def _without_longer(literals: set[str]) -> list[bytes]:
    """A literal that holds another is found wherever that one is: only the shorter one is searched for."""
    kept = [lit for lit in literals if not any(other != lit and other in lit for other in literals)]
    return sorted(lit.encode() for lit in kept)


@dataclass(frozen=True)
class CandidateFinder:
    literals: tuple[bytes, ...]
    regexes: tuple[re.Pattern, ...]     # byte patterns of the signatures with no required literal
    every_line: bool = False            # a signature with neither: every line is a candidate

    @classmethod
    def for_patterns(cls, matches: list[Match]) -> CandidateFinder:
        literals: set[str] = set()
        regexes: list[re.Pattern | None] = []
        for match in matches:
            found = _match_literals(match)
            if found:
                literals |= found
            else:
                regexes.append(_search_regex(match.regex))
        searchable = tuple(r for r in regexes if r is not None)
        return cls(tuple(_without_longer(literals)), searchable, len(searchable) < len(regexes))

    @classmethod
    def for_catalog(cls, catalog: Catalog) -> CandidateFinder:
        return cls.for_patterns([s.match for s in catalog.signatures])

    def line_starts(self, text: bytes) -> list[int]:
        """The start offsets of the lines (split at \\n) that hold a literal or a regex's match, in order. Each
        search goes on from the next line after a hit, so a long line costs one pass, not one per hit."""
        if self.every_line:
            return [0] + [found.end() for found in re.finditer(b"\n", text) if found.end() < len(text)]
        starts: set[int] = set()
        for literal in self.literals:
            at = text.find(literal)
            while at >= 0:
                starts.add(text.rfind(b"\n", 0, at) + 1)
                end = text.find(b"\n", at)
                at = -1 if end < 0 else text.find(literal, end)
        for regex in self.regexes:
            found = regex.search(text)
            while found is not None:
                starts.add(text.rfind(b"\n", 0, found.start()) + 1)
                end = text.find(b"\n", found.start())
                found = None if end < 0 else regex.search(text, end + 1)
        return sorted(starts)
