"""Who may open the console, and the CSRF tokens of its forms.

An operator logs in with a console token (``groundkit tokens create --console NAME``); a member's
token is refused. The console then keeps a session in memory, under a random id in an
``HttpOnly``, ``SameSite=Strict`` cookie: it holds the token's SHA-256 (never the token), and
every request asks the database whether that token still opens the console, so a revoked or
expired token ends its sessions at their next request. Sessions also end after
``idle``/``lifetime`` and when the server restarts.

Every form that changes state (log in, log out) carries a CSRF token: an HMAC, under a key made
at startup, of the session id (or, for the login form, of a pre-login cookie), compared in
constant time. A request the browser marks as coming from another site (``Sec-Fetch-Site``) is
refused as well. A few dozen lines, written here rather than taken from a package: the packages
for Starlette check a header that plain HTML forms cannot send, or need a signed-cookie session
this console does not use.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from groundkit.errors import ConsoleFormRefused

SESSION_COOKIE = "gk_console"
LOGIN_COOKIE = "gk_console_login"
IDLE_SECONDS = 3600.0
LIFETIME_SECONDS = 12 * 3600.0
MAX_SESSIONS = 1000


@dataclass
class Session:
    id: str
    operator: str
    token_digest: bytes
    started: float = field(default_factory=time.monotonic)
    seen: float = field(default_factory=time.monotonic)


class Sessions:
    """The console's sessions, in memory, at most :data:`MAX_SESSIONS` (the oldest goes first)."""

    def __init__(self, idle: float = IDLE_SECONDS, lifetime: float = LIFETIME_SECONDS,
                 max_sessions: int = MAX_SESSIONS) -> None:
        self.idle = idle
        self.lifetime = lifetime
        self.max_sessions = max_sessions
        self._key = secrets.token_bytes(32)  # the CSRF tokens' key, this process's own
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, operator: str, token_digest: bytes) -> Session:
        session = Session(secrets.token_urlsafe(32), operator, token_digest)
        with self._lock:
            self._sessions[session.id] = session
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of ``session_id``; an idle or too old one is ended."""
        if not session_id:
            return None
        now = time.monotonic()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return None
            if now - session.seen > self.idle or now - session.started > self.lifetime:
                del self._sessions[session_id]
                return None
            session.seen = now
            return session

    def end(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def csrf(self, bound_to: str, purpose: str) -> str:
        """The CSRF token of a form of ``purpose`` for a session (or a pre-login cookie)."""
        return hmac.new(self._key, f"{purpose}\x00{bound_to}".encode(), hashlib.sha256).hexdigest()

    def check_csrf(self, bound_to: str | None, purpose: str, sent: str | None) -> None:
        """:class:`ConsoleFormRefused` unless ``sent`` is the CSRF token for ``bound_to``."""
        if not bound_to or not sent or not hmac.compare_digest(self.csrf(bound_to, purpose), sent):
            raise ConsoleFormRefused("the form's CSRF token is missing or does not match this session: reload the page "
                              "and send the form again")


def check_same_site(sec_fetch_site: str | None) -> None:
    """:class:`ConsoleFormRefused` for a request the browser says another site made (or a sibling
    subdomain: ``same-site``). ``none`` is the user's own navigation; no header, an older browser
    or a script, which the CSRF token covers."""
    if sec_fetch_site is not None and sec_fetch_site not in ("same-origin", "none"):
        raise ConsoleFormRefused("the form was sent from another site")
