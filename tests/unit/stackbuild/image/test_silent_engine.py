"""An engine that does not answer a digest look-up within the deadline: the line says whether the
registry is gone (its address refuses connections, asked directly) or the engine is slow.

The silent engine is a stand-in on a TCP port that accepts connections and never answers (no real
engine can be made that slow on purpose); the registry's address is a real closed port, or a real
listening one.
"""

from __future__ import annotations

import socket
import threading
import time

import docker
import pytest
from stack_e2e import closed_port

from stackbuild.core.errors import RegistryUnavailable
from stackbuild.core.reference import ImageReference
from stackbuild.image.engine import DockerEngine


@pytest.fixture
def silent_engine():
    """A DockerEngine whose endpoint accepts a connection and says nothing."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    client = docker.DockerClient(base_url=f"tcp://127.0.0.1:{server.getsockname()[1]}", version="1.41", timeout=30)
    try:
        yield DockerEngine(client)
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        server.close()


def test_a_registry_that_refuses_is_said_unreachable_when_the_engine_is_silent(silent_engine):
    address = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    with pytest.raises(RegistryUnavailable) as raised:
        silent_engine.registry_digest(ImageReference(f"{address}/acme/base:1"), deadline=1.0)
    assert time.monotonic() - started < 10
    line = str(raised.value)
    assert "\n" not in line
    assert "registry unreachable (not retried)" in line and f"{address}: connection refused" in line, line


def test_a_silent_engine_is_not_blamed_on_a_registry_that_accepts(silent_engine):
    with socket.socket() as registry:
        registry.bind(("127.0.0.1", 0))
        registry.listen()
        address = f"127.0.0.1:{registry.getsockname()[1]}"
        with pytest.raises(RegistryUnavailable) as raised:
            silent_engine.registry_digest(ImageReference(f"{address}/acme/base:1"), deadline=1.0)
    line = str(raised.value)
    assert "the engine gave no answer within 1 s" in line and f"{address} accepts connections" in line, line
    assert "unreachable" not in line
