"""The registry error taxonomy, checked without a registry: what each error means, and which are retried."""

from __future__ import annotations

import socket
import time

import pytest
from stack_e2e import closed_port

from stackbuild.core.errors import PushError, RegistryAuthError, RegistryUnavailable
from stackbuild.image.registry_errors import (
    RegistryTransient,
    classify_registry_error,
    nobody_answers_at,
    registry_retry,
)


@pytest.mark.parametrize(
    "message, kind",
    [
        ("unauthorized: authentication required", RegistryAuthError),
        ("no basic auth credentials", RegistryAuthError),
        ("denied: requested access to the resource is denied", PushError),
        ("manifest unknown: manifest unknown", PushError),
        ('Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused', RegistryUnavailable),
        (
            'Get "https://registry.invalid/v2/": dial tcp: lookup registry.invalid on 10.0.0.53:53: no such host',
            RegistryUnavailable,
        ),
        ("registry.invalid: [Errno -2] name or service not known", RegistryUnavailable),
        ("registry.invalid: [Errno -3] temporary failure in name resolution", RegistryUnavailable),
        ("net/http: TLS handshake timeout", RegistryTransient),
        ("received unexpected HTTP status: 503 Service Unavailable", RegistryTransient),
        ("toomanyrequests: slow down", RegistryTransient),
        ("something nobody has seen", PushError),
    ],
)
def test_registry_errors_are_classified(message, kind):
    assert type(classify_registry_error("push x", message)) is kind


def test_an_unreachable_registry_is_reported_at_once(monkeypatch):
    """A refused connection or a name that does not resolve: one attempt, no retry line."""
    monkeypatch.setenv("STACKBUILD_REGISTRY_BACKOFF", "0.01")
    calls, retries = [], []

    def refused():
        calls.append(1)
        raise classify_registry_error("push x", "dial tcp 127.0.0.1:9: connect: connection refused")

    with pytest.raises(
        RegistryUnavailable, match=r"^push x: registry unreachable \(not retried\): .*connection refused$"
    ):
        registry_retry("push x", retries.append)(refused)
    assert calls == [1] and retries == []


def test_a_deadline_starts_no_wait_that_ends_after_it(monkeypatch):
    monkeypatch.setenv("STACKBUILD_REGISTRY_ATTEMPTS", "10")
    monkeypatch.setenv("STACKBUILD_REGISTRY_BACKOFF", "0.2")
    calls = []

    def down():
        calls.append(time.monotonic())
        raise RegistryTransient("lock x", "503 Service Unavailable")

    started = time.monotonic()
    with pytest.raises(RegistryUnavailable, match=r"after 3 attempts"):
        registry_retry("lock x", deadline=1.0)(down)  # waits 0.2, 0.4; the next (0.8) would end after 1 s
    assert len(calls) == 3 and time.monotonic() - started < 1.0


def test_transient_errors_are_retried_then_reported(monkeypatch):
    monkeypatch.setenv("STACKBUILD_REGISTRY_ATTEMPTS", "3")
    monkeypatch.setenv("STACKBUILD_REGISTRY_BACKOFF", "0.01")
    calls, retries = [], []

    def down():
        calls.append(1)
        raise RegistryTransient("push x", "connection refused")

    with pytest.raises(
        RegistryUnavailable, match=r"^push x: registry unavailable after 3 attempts: connection refused$"
    ):
        registry_retry("push x", retries.append)(down)
    assert len(calls) == 3 and [r["attempt"] for r in retries] == [1, 2]


@pytest.mark.parametrize("error", [RegistryAuthError("push x: refused"), PushError("push x: denied")])
def test_final_errors_are_not_retried(monkeypatch, error):
    monkeypatch.setenv("STACKBUILD_REGISTRY_BACKOFF", "0.01")
    calls = []

    def final():
        calls.append(1)
        raise error

    with pytest.raises(type(error)):
        registry_retry("push x")(final)
    assert calls == [1]


def test_nobody_answers_at_a_closed_port_or_a_name_that_does_not_resolve():
    assert nobody_answers_at(f"127.0.0.1:{closed_port()}") == "connection refused"
    assert nobody_answers_at("registry.invalid") == "name does not resolve"
    assert nobody_answers_at("registry.invalid:5000") == "name does not resolve"
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert nobody_answers_at(f"127.0.0.1:{listening.getsockname()[1]}") is None
    # No port named: the registry may answer on another than the one tried, so this cannot tell.
    assert nobody_answers_at("127.0.0.1") is None
    assert nobody_answers_at("127.0.0.1:notaport") is None and nobody_answers_at("") is None
