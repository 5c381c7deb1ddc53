"""What a registry's error means: authentication refused, final, unreachable, or worth retrying.

The engine's pulls, pushes and digest look-ups and the registry client report a registry's
error as text; :func:`classify_registry_error` maps that text to the exception the caller
raises (or retries), and :func:`registry_retry` retries the transient ones with backoff.
"""

from __future__ import annotations

import os
import re
import socket
import urllib.parse
from typing import Optional

import tenacity

from stackbuild.core.errors import PushError, RegistryAuthError, RegistryUnavailable, StackBuildError
from stackbuild.core.reference import DOCKER_HUB
from stackbuild.image.engine_api import EventSink

# What a registry error says, and what it means for a retry.
_AUTH_PATTERNS = re.compile(
    r"unauthorized|authentication required|no basic auth credentials|incorrect username or password"
    r"|401 unauthorized|invalid username/password",
    re.I,
)
_FINAL_PATTERNS = re.compile(
    r"denied|forbidden|manifest unknown|name unknown|blob unknown|not found|does not exist"
    r"|invalid reference|manifest invalid|unsupported|does not match the specified platform"
    r"|server gave HTTP response to HTTPS client",
    re.I,
)
# Nobody answers at that address (refused, or the name does not resolve): asking again
# in a few seconds gets the same answer, so it is reported at once.
_UNREACHABLE_PATTERNS = re.compile(
    r"connection refused|no such host|name or service not known|nodename nor servname|failed to resolve"
    r"|temporary failure in name resolution|name resolution|server misbehaving|getaddrinfo|could not resolve",
    re.I,
)
_TRANSIENT_PATTERNS = re.compile(
    r"connection reset|broken pipe|no route to host|i/o timeout|timeout|timed out"
    r"|\bEOF\b|temporary failure|try again|too many requests|toomanyrequests|\b429\b|\b50[0234]\b"
    r"|service unavailable|bad gateway|internal server error|dial tcp|network is unreachable",
    re.I,
)


class RegistryTransient(StackBuildError):
    """A registry error worth retrying (network, 5xx, 429); becomes RegistryUnavailable."""

    def __init__(self, what: str, reason: str):
        super().__init__(f"{what}: {reason}")
        self.reason = reason


def unreachable(text: str) -> bool:
    """Whether an error says nobody answers at the registry's address
    (a refused connection, a name that does not resolve)."""
    return bool(_UNREACHABLE_PATTERNS.search(text))


def nobody_answers_at(address: str, timeout: float = 2.0) -> Optional[str]:
    """Why nobody answers at a registry's address (``host[:port]``), asked directly: "name does not
    resolve", or "connection refused" at a port the address names. None when something accepts the
    connection, or when this cannot tell (no port named: the registry may answer on another; a slow
    network). For the engine's silence to be told from the registry's; asked from this host, which
    sees the registry as the engine does unless DOCKER_HOST names another machine."""
    parts = urllib.parse.urlsplit("//" + address)
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    try:
        if port is None:
            socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
        else:
            socket.create_connection((host, port), timeout=timeout).close()
    except socket.gaierror:
        return "name does not resolve"
    except ConnectionRefusedError:
        return "connection refused"
    except OSError:
        return None
    return None


def classify_registry_error(what: str, message: str, registry: str = "", final: type = PushError) -> StackBuildError:
    """Map a registry error message to the exception the caller raises (or retries).

    ``final`` is the class of what cannot succeed (PushError for a push,
    PullError for a pull, LockError for a digest look-up).
    """
    text = message.strip()
    if unreachable(text):
        return RegistryUnavailable(f"{what}: registry unreachable (not retried): {text}")
    if _AUTH_PATTERNS.search(text):
        login = f"docker login {registry}" if registry and registry != DOCKER_HUB else "docker login"
        return RegistryAuthError(
            f"{what}: the registry refused the credentials from the Docker config ({text}); run `{login}`"
        )
    if _FINAL_PATTERNS.search(text):
        return final(f"{what}: {text}")
    if _TRANSIENT_PATTERNS.search(text):
        return RegistryTransient(what, text)
    return final(f"{what}: {text}")


def registry_retry(
    what: str, on_retry: Optional[EventSink] = None, deadline: Optional[float] = None
) -> tenacity.Retrying:
    """Backoff for transient registry errors; everything else is raised at once.

    ``STACKBUILD_REGISTRY_ATTEMPTS`` (default 5) and ``STACKBUILD_REGISTRY_BACKOFF``
    (first wait in seconds, default 2, doubling up to 30) tune it. With a
    ``deadline`` (seconds), no wait is started that would end after it.
    """
    attempts = max(1, int(os.environ.get("STACKBUILD_REGISTRY_ATTEMPTS", "5")))
    first = float(os.environ.get("STACKBUILD_REGISTRY_BACKOFF", "2"))
    stop = tenacity.stop_after_attempt(attempts)
    if deadline is not None:
        stop = stop | tenacity.stop_before_delay(deadline)

    def before_sleep(state: tenacity.RetryCallState) -> None:
        if on_retry is not None:
            exc = state.outcome.exception() if state.outcome else None
            on_retry(
                {
                    "event": "retry",
                    "what": what,
                    "attempt": state.attempt_number,
                    "of": attempts,
                    "wait_seconds": round(state.next_action.sleep if state.next_action else 0, 1),
                    "error": str(getattr(exc, "reason", exc)),
                }
            )

    def give_up(state: tenacity.RetryCallState):
        exc = state.outcome.exception() if state.outcome else None
        reason = getattr(exc, "reason", exc)
        raise RegistryUnavailable(f"{what}: registry unavailable after {state.attempt_number} attempts: {reason}")

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(RegistryTransient),
        stop=stop,
        wait=tenacity.wait_exponential(multiplier=first, min=first, max=30),
        before_sleep=before_sleep,
        retry_error_callback=give_up,
        reraise=True,
    )
