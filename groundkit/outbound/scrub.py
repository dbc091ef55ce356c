"""The redaction boundary: remove what the outbound policy names from a text before it leaves.

Detectors (each a kind the policy's ``scrub`` list may name):

- ``email``: addresses, by a pattern (local part, ``@``, a dotted domain with a TLD);
- ``phone``: numbers Google's libphonenumber finds (the ``phonenumbers`` package's
  ``PhoneNumberMatcher``, valid numbers only), in the policy's ``phone_regions`` (numbers written
  with ``+`` and a country code are found in any region);
- ``url_credentials``: the user info of a URL (``scheme://user:password@host``), the URL kept;
- ``secrets``: the token patterns of Yelp's ``detect-secrets`` (its regex plugins: AWS, GitHub,
  GitLab, Slack, Stripe, OpenAI, JWT, private-key headers and more; only their patterns, never
  their network verification), ``key = value`` assignments of passwords, tokens and API keys,
  ``Bearer`` tokens, ``sk-``/``pk-``/``rk-`` keys, and long high-entropy base64-ish tokens
  (Shannon entropy by ``detect-secrets``' own function);
- ``member_names``: the members' display names (``groundkit.members.display_name``), whole, and
  each part of three letters or more, case-sensitive, at word boundaries.

Each match is replaced by a marker (``[email]``, ``[phone]``, ``[credentials]``, ``[secret]``,
``[member]``); overlapping matches are merged. :meth:`Scrubber.scrub` returns the text and how
many of each kind it removed, never what. The cost per chunk: ``python -m evals.bench scrub``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterable, Sequence
from typing import Any

from groundkit.outbound.policy import ScrubKind

__all__ = ["INSTALL_OUTBOUND", "Scrubber", "ScrubberUnavailable", "scrubber"]

INSTALL_OUTBOUND = "pip install 'groundkit[outbound]'"

MARKERS: dict[str, str] = {"email": "[email]", "phone": "[phone]", "url_credentials": "[credentials]",
                           "secrets": "[secret]", "member_names": "[member]"}

# (not after ':' or '/': 'user:password@host' in a URL is credentials, not an address)
_EMAIL = re.compile(r"(?<![\w.+\-:/])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
# the user info of a URL: what lies between '://' and the last '@' before the host
_URL_USERINFO = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://([^\s/?#@]+(?::[^\s/?#@]*)?)@(?=[^\s/?#@])")
_KEYWORD = re.compile(
    r"(?i)\b(?:password|passwd|pwd|passphrase|secret|client[_-]?secret|api[_-]?key|apikey|access[_-]?key|"
    r"access[_-]?token|auth[_-]?token|refresh[_-]?token|private[_-]?key|token)\b[\"']?\s*[:=]\s*[\"']?"
    r"([^\s\"',;]{6,})")
_BEARER = re.compile(r"\bBearer\s+([A-Za-z0-9._~+/-]{16,}=*)")
_PREFIXED_KEY = re.compile(r"(?<![\w-])(?:sk|pk|rk)[-_][A-Za-z0-9_-]{20,}")
_LONG_TOKEN = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{32,}={0,2}(?![A-Za-z0-9+/_=-])")
_ENTROPY_MIN = 4.0
# something that may be a phone number: 7 digits or more, with the separators numbers are written with
_PHONE_CANDIDATE = re.compile(r"\+?\(?\d(?:[\d\s().\-/]*\d){6,}")
_SPAN_TRIM = " \t\r\n\"'=:"


class ScrubberUnavailable(Exception):
    """A detector the policy names needs a package that is not installed."""

    def __init__(self, kind: str, package: str) -> None:
        super().__init__(f"the {kind} scrubber needs {package}: {INSTALL_OUTBOUND}")
        self.kind = kind


# Literals without which a detect-secrets plugin's patterns cannot match (lower case: looked up in
# the lowered text; with a capital, in the text as it is), so that a chunk without any skips
# them: running all of them on every chunk cost about 3 ms per 1,000-character chunk (python -m
# evals.bench outbound). A plugin not listed here (a newer detect-secrets' addition) always runs.
_CREDENTIAL_WORDS = ("key", "pw", "pass", "token")
_HINTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "ArtifactoryDetector": (("AKC",), ("AP",)),
    "AWSKeyDetector": (("a3t", "abia", "acca", "akia", "asia"), ("aws",)),
    "AzureStorageKeyDetector": (("accountkey",),),
    "BasicAuthDetector": (("://",),),
    "CloudantDetector": (_CREDENTIAL_WORDS, _CREDENTIAL_WORDS, ("cloudant",), ("cloudant",)),
    "DiscordBotTokenDetector": ((".",),),
    "GitHubTokenDetector": (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),),
    "GitLabTokenDetector": (("glpat-", "gldt-", "glft-", "glsoat-", "glrt-"), ("gr1348941",), ("glcbt-",),
                            ("glimt-",), ("glptt-",), ("glagent-",), ("gloas-",)),
    "IbmCloudIamDetector": (_CREDENTIAL_WORDS,),
    "IbmCosHmacDetector": (("secret",),),
    "JwtTokenDetector": (("eyj",),),
    "MailchimpDetector": (("-us",),),
    "NpmDetector": (("_authtoken",),),
    "OpenAIDetector": (("t3blbkfj",),),
    "PrivateKeyDetector": (("begin", "putty"),) * 8,
    "PypiTokenDetector": (("pypi-",), ("pypi-",)),
    "SendGridDetector": (("sg.",),),
    "SlackDetector": (("xox",), ("hooks.slack.com",)),
    "SoftlayerDetector": (_CREDENTIAL_WORDS, ("softlayer",)),
    "SquareOAuthDetector": (("sq0csp-",),),
    "StripeDetector": (("_live_",),),
    "TelegramBotTokenDetector": ((":",),),
    "TwilioKeyDetector": (("AC",), ("SK",)),
}
_OWN_HINTS: tuple[tuple[str, ...], ...] = (
    ("pass", "pwd", "secret", "key", "token"),  # _KEYWORD
    ("bearer",),  # _BEARER
    ("sk-", "sk_", "pk-", "pk_", "rk-", "rk_"),  # _PREFIXED_KEY
)

# (pattern, literals one of which the lowered text must hold; () for none)
SecretPattern = tuple[re.Pattern[str], tuple[str, ...]]


@functools.cache
def _secret_patterns() -> tuple[SecretPattern, ...]:
    """Every regex of detect-secrets' regex plugins (not the public-IP one: an address is no
    secret), and groundkit's own, each with the literals it needs."""
    try:
        import detect_secrets.plugins as plugins
        from detect_secrets.plugins.base import RegexBasedDetector
    except ImportError:
        raise ScrubberUnavailable("secrets", "detect-secrets") from None
    patterns: list[SecretPattern] = []
    for info in pkgutil.iter_modules(plugins.__path__):
        module = importlib.import_module(f"{plugins.__name__}.{info.name}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if (issubclass(cls, RegexBasedDetector) and cls is not RegexBasedDetector
                    and cls.__module__ == module.__name__ and name != "IPPublicDetector"):
                denylist: list[re.Pattern[str]] = list(cls.denylist)  # type: ignore[call-overload]
                hints = _HINTS.get(name, ())
                for i, pattern in enumerate(denylist):
                    patterns.append((pattern, hints[i] if len(hints) == len(denylist) else ()))
    own = (_KEYWORD, _BEARER, _PREFIXED_KEY)
    return (*patterns, *zip(own, _OWN_HINTS, strict=True))


@functools.cache
def _entropy() -> Any:
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

    return Base64HighEntropyString().calculate_shannon_entropy


def _phonenumbers() -> Any:
    try:
        import phonenumbers
    except ImportError:
        raise ScrubberUnavailable("phone", "phonenumbers") from None
    return phonenumbers


_NAME_TOKEN = re.compile(r"\w[\w'\u2019-]*")  # (U+2019: the typographic apostrophe)
_POSSESSIVE = re.compile(r"['\u2019]s$")


class _Names:
    """Member names as word lookups: each name whole (its words in sequence) and each of its parts
    of three letters or more, case-sensitive. A set lookup per word of the text: an alternation of
    a thousand members' names cost milliseconds per chunk."""

    def __init__(self, names: Sequence[str]) -> None:
        self.parts: set[str] = set()
        self.wholes: dict[str, set[tuple[str, ...]]] = {}  # first word -> the names' word tuples
        self.longest = 1
        for name in names:
            words = tuple(_NAME_TOKEN.findall(name))
            if not words:
                continue
            self.parts.update(w for w in words if len(w) >= 3)
            if len(words) > 1:
                self.wholes.setdefault(words[0], set()).add(words)
                self.longest = max(self.longest, len(words))

    def __bool__(self) -> bool:
        return bool(self.parts or self.wholes)

    def spans(self, text: str) -> list[tuple[int, int]]:
        tokens = [(m.start(), m.end(), _POSSESSIVE.sub("", m.group())) for m in _NAME_TOKEN.finditer(text)]
        words = [t[2] for t in tokens]
        out: list[tuple[int, int]] = []
        for i, (start, _end, word) in enumerate(tokens):
            for whole in self.wholes.get(word, ()):
                if tuple(words[i:i + len(whole)]) == whole:
                    out.append((start, tokens[i + len(whole) - 1][1]))
            if word in self.parts:
                out.append((start, start + len(word)))
        return out


class Scrubber:
    """A compiled scrubber for a set of kinds (build it with :func:`scrubber`, which caches)."""

    def __init__(self, kinds: Iterable[ScrubKind], phone_regions: Sequence[str] = ("US",),
                 names: Sequence[str] = ()) -> None:
        self.kinds = tuple(sorted(set(kinds)))
        self.phone_regions = tuple(phone_regions)
        self._secrets = _secret_patterns() if "secrets" in self.kinds else ()
        if "secrets" in self.kinds:
            self._entropy = _entropy()
        self._phone = _phonenumbers() if "phone" in self.kinds else None
        self._names = _Names(names) if "member_names" in self.kinds else None

    def _spans(self, text: str) -> list[tuple[int, int, str]]:
        spans: list[tuple[int, int, str]] = []
        kinds = self.kinds
        if "url_credentials" in kinds:
            spans += [(m.start(1), m.end(1), "url_credentials") for m in _URL_USERINFO.finditer(text)]
        if "secrets" in kinds:
            lowered = text.lower()
            for pattern, hints in self._secrets:
                if hints and not any(h in (lowered if h.islower() or not h.isalpha() else text) for h in hints):
                    continue
                for m in pattern.finditer(text):
                    # a pattern's first group is its secret where it captures one (a password after
                    # 'user:'), not where it captures a prefix ('ghp' of a GitHub token)
                    group = 1 if m.re.groups and len(m.group(1) or "") >= 8 else 0
                    start, end = _trim(text, m.start(group), m.end(group))
                    if end > start:
                        spans.append((start, end, "secrets"))
            for m in _LONG_TOKEN.finditer(text):
                token = m.group(0)
                if (any(c.isdigit() for c in token) and any(c.isalpha() for c in token)
                        and self._entropy(token) >= _ENTROPY_MIN):
                    spans.append((m.start(), m.end(), "secrets"))
        if "email" in kinds:
            spans += [(m.start(), m.end(), "email") for m in _EMAIL.finditer(text)]
        if self._phone is not None:
            spans += self._phone_spans(text)
        if self._names:
            spans += [(start, end, "member_names") for start, end in self._names.spans(text)]
        return spans

    def _phone_spans(self, text: str) -> list[tuple[int, int, str]]:
        """libphonenumber's matches, looked for only around runs of digits long enough to be a
        number (its matcher over a whole chunk cost about 0.5 ms)."""
        spans: list[tuple[int, int, str]] = []
        phone = self._phone
        assert phone is not None
        for candidate in _PHONE_CANDIDATE.finditer(text):
            start = max(candidate.start() - 1, 0)
            window = text[start:candidate.end() + 1]
            for region in self.phone_regions or ("US",):
                spans += [(start + m.start, start + m.end, "phone")
                          for m in phone.PhoneNumberMatcher(window, region)]
        return spans

    def scrub(self, text: str) -> tuple[str, dict[str, int]]:
        """``text`` with every match replaced by its marker, and the count per kind."""
        spans = self._spans(text)
        if not spans:
            return text, {}
        spans.sort(key=lambda s: (s[0], -s[1]))
        out: list[str] = []
        counts: dict[str, int] = {}
        pos = 0
        end_of_last = -1
        for start, end, kind in spans:
            if start < end_of_last:  # overlaps the previous match: merged into it
                if end > end_of_last:
                    end_of_last = end
                    pos = end
                continue
            out.append(text[pos:start])
            out.append(MARKERS[kind])
            counts[kind] = counts.get(kind, 0) + 1
            pos = end_of_last = end
        out.append(text[pos:])
        return "".join(out), counts

    def scrub_all(self, texts: Sequence[str]) -> tuple[list[str], dict[str, int]]:
        """Every text scrubbed, and the counts summed."""
        total: dict[str, int] = {}
        done = []
        for text in texts:
            clean, counts = self.scrub(text)
            done.append(clean)
            for kind, n in counts.items():
                total[kind] = total.get(kind, 0) + n
        return done, total


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start] in _SPAN_TRIM:
        start += 1
    while end > start and text[end - 1] in _SPAN_TRIM:
        end -= 1
    return start, end


_CACHE: dict[tuple[Any, ...], Scrubber] = {}


def scrubber(kinds: Iterable[ScrubKind], phone_regions: Sequence[str] = ("US",), names: Sequence[str] = (),
             names_stamp: str = "") -> Scrubber:
    """A :class:`Scrubber` for these kinds, built once per process for each set of kinds, regions
    and names (``names_stamp`` identifies the names: a change rebuilds it)."""
    kinds = tuple(sorted(set(kinds)))
    key = (kinds, tuple(phone_regions), names_stamp if "member_names" in kinds else "")
    built = _CACHE.get(key)
    if built is None:
        if len(_CACHE) > 32:
            _CACHE.clear()
        built = _CACHE[key] = Scrubber(kinds, phone_regions, names)
    return built
