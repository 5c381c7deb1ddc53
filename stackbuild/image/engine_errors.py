"""The Docker engine vanishing or refusing mid-run, as one-line errors rather than tracebacks."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import docker
import docker.errors
import requests

from geometry import one_line
from stackbuild.core.errors import EngineError, EngineUnavailable, StackBuildError


@contextmanager
def engine_errors(what: str) -> Iterator[None]:
    """Turn the engine vanishing or refusing mid-run into one-line errors, not tracebacks."""
    try:
        yield
    except StackBuildError:
        raise
    except requests.exceptions.ConnectionError as exc:
        raise EngineUnavailable(f"{what}: the Docker engine stopped answering ({one_line(exc)[:400]})") from None
    except docker.errors.APIError as exc:
        raise EngineError(f"{what}: the Docker engine refused: {one_line(api_error_text(exc))[:400]}") from None
    except docker.errors.DockerException as exc:
        raise EngineError(f"{what}: {one_line(exc)[:400]}") from None


def api_error_text(exc: docker.errors.APIError) -> str:
    """What the engine said when it refused a request."""
    explanation = exc.explanation
    if isinstance(explanation, bytes):
        explanation = explanation.decode("utf-8", "replace")
    return str(explanation or exc)
