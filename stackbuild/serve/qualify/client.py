"""The HTTP side of `qualify`: one vLLM OpenAI server, its API key, and the errors a user must tell apart."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Iterator, Optional

import requests

from stackbuild.core.errors import ModelNotServed, NotVllmServer, ServerAuthRefused, ServerUnreachable

# Seconds one request may take before the server counts as not answering (a generation's own budget).
REQUEST_TIMEOUT_S = 300
CONNECT_TIMEOUT_S = 5


class Retryable(Exception):
    """The server is not ready yet (nothing listens, 5xx, connection reset): retried until the readiness timeout."""


@dataclass(frozen=True)
class Completion:
    """One non-streamed generation: its text, the tokens the server counted and the wall time."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float


@dataclass(frozen=True)
class Streamed:
    """One streamed generation, timed as vLLM's benchmark times it (lib/endpoint_request_func.py): the
    time to the first chunk that carries a token, the gaps between token chunks, and the latency to the
    last token chunk; the tokens are the server's usage chunk's (stream_options.include_usage)."""

    ttft_s: Optional[float]  # None: no chunk carried a token although usage counts some
    itl_s: tuple[float, ...]
    latency_s: float
    prompt_tokens: int
    completion_tokens: int
    text: str

    @property
    def tpot_s(self) -> Optional[float]:
        """(latency - TTFT) / (output tokens - 1): vLLM's TPOT (None for one token or no TTFT)."""
        if self.ttft_s is None or self.completion_tokens <= 1:
            return None
        return (self.latency_s - self.ttft_s) / (self.completion_tokens - 1)


@dataclass(frozen=True)
class ServedModel:
    """A model the server lists, and the ``max_model_len`` its /v1/models entry gives (None: none given)."""

    name: str
    max_model_len: Optional[int]


class Server:
    """A vLLM OpenAI server at ``url``; ``api_key`` is sent as a bearer token (never logged)."""

    def __init__(self, url: str, api_key: Optional[str] = None, *, role: str = "--url"):
        self.url = url.rstrip("/")
        self.role = role
        self._session = requests.Session()
        if api_key:
            self._session.headers["Authorization"] = f"Bearer {api_key}"

    # ------------------------------------------------------------------ transport
    def _request(self, method: str, path: str, *, retry: bool = False, **kw) -> requests.Response:
        where = f"{self.role} {self.url}{path}"
        try:
            response = self._session.request(
                method, self.url + path, timeout=(CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S), **kw
            )
        except requests.exceptions.ConnectionError as exc:
            if retry:
                raise Retryable(f"{where}: nothing answers ({_reason(exc)})") from None
            raise ServerUnreachable(f"{where}: nothing answers ({_reason(exc)})") from None
        except requests.exceptions.Timeout:
            if retry:
                raise Retryable(f"{where}: no answer within {REQUEST_TIMEOUT_S} s") from None
            raise ServerUnreachable(f"{where}: no answer within {REQUEST_TIMEOUT_S} s") from None
        except requests.exceptions.RequestException as exc:  # an unusable URL (no scheme, bad host)
            raise ServerUnreachable(f"{where}: {type(exc).__name__}: {_reason(exc)}") from None
        if response.status_code in (401, 403):
            raise ServerAuthRefused(
                f"{where}: HTTP {response.status_code}: the server refused the API key (give it with --api-key-env VAR)"
            )
        if retry and response.status_code >= 500:
            raise Retryable(f"{where}: HTTP {response.status_code}")
        return response

    def _json(self, response: requests.Response, path: str) -> dict:
        try:
            data = response.json()
        except ValueError:
            raise NotVllmServer(
                f"{self.role} {self.url}{path}: HTTP {response.status_code}, not JSON: not a vLLM OpenAI server"
            ) from None
        if not isinstance(data, dict):
            raise NotVllmServer(f"{self.role} {self.url}{path}: not a JSON object: not a vLLM OpenAI server")
        return data

    # ------------------------------------------------------------------ endpoints
    def _cards(self, *, retry: bool = False) -> tuple[dict, ...]:
        """The model entries /v1/models lists (each with its id)."""
        response = self._request("GET", "/v1/models", retry=retry)
        if response.status_code != 200:
            raise NotVllmServer(
                f"{self.role} {self.url}/v1/models: HTTP {response.status_code}: not a vLLM OpenAI server"
            )
        data = self._json(response, "/v1/models").get("data")
        if not isinstance(data, list) or not all(isinstance(m, dict) and "id" in m for m in data):
            raise NotVllmServer(f"{self.role} {self.url}/v1/models: no model list: not a vLLM OpenAI server")
        return tuple(data)

    def models(self, *, retry: bool = False) -> tuple[str, ...]:
        """The names /v1/models lists."""
        return tuple(str(m["id"]) for m in self._cards(retry=retry))

    def served_model(self, wanted: Optional[str], *, source: str = "--model", retry: bool = False) -> ServedModel:
        """The model to request and its ``max_model_len``, from one /v1/models answer: ``wanted`` (named by
        ``source``), or the one model the server lists; ModelNotServed otherwise."""
        cards = self._cards(retry=retry)
        served = [str(m["id"]) for m in cards]
        if wanted is None:
            if len(served) != 1:
                raise ModelNotServed(
                    f"{self.role} {self.url} serves {', '.join(served) or 'no model'}: name one with --model"
                )
            wanted = served[0]
        elif wanted not in served:
            raise ModelNotServed(
                f"{self.role} {self.url} does not serve model {wanted!r} "
                f"(it serves {', '.join(served) or 'none'}): {source}"
            )
        card = cards[served.index(wanted)]
        length = card.get("max_model_len")
        return ServedModel(wanted, length if isinstance(length, int) and not isinstance(length, bool) else None)

    def pick_model(self, wanted: Optional[str], *, retry: bool = False) -> str:
        return self.served_model(wanted, retry=retry).name

    def metrics_text(self) -> str:
        response = self._request("GET", "/metrics")
        if response.status_code != 200:
            raise NotVllmServer(
                f"{self.role} {self.url}/metrics: HTTP {response.status_code}: "
                "not a vLLM server (qualify reads its counters)"
            )
        return response.text

    def version(self) -> Optional[str]:
        """vLLM's /version, or None when the server has none."""
        response = self._request("GET", "/version")
        if response.status_code != 200:
            return None
        try:
            return str(response.json().get("version"))
        except (ValueError, AttributeError):
            return None

    def tokenize(self, model: str, text: str) -> list[int]:
        response = self._request(
            "POST", "/tokenize", json={"model": model, "prompt": text, "add_special_tokens": False}
        )
        if response.status_code != 200:
            raise NotVllmServer(f"{self.role} {self.url}/tokenize: HTTP {response.status_code}: not a vLLM server")
        return list(self._json(response, "/tokenize")["tokens"])

    def chat(self, model: str, prompt: str, max_tokens: int) -> Completion:
        """A non-streamed chat generation of exactly ``max_tokens`` tokens (_chat_body), timed request to answer."""
        body = _chat_body(model, prompt, max_tokens, stream=False)
        start = time.perf_counter()
        response = self._request("POST", "/v1/chat/completions", json=body)
        seconds = time.perf_counter() - start
        data = self._generation(response, "/v1/chat/completions", model)
        usage = data.get("usage") or {}
        return Completion(
            text=data["choices"][0]["message"].get("content") or "",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            seconds=seconds,
        )

    def max_model_len(self, model: str) -> Optional[int]:
        """The ``max_model_len`` /v1/models gives for ``model`` (None: not listed)."""
        for card in self._cards():
            length = card.get("max_model_len")
            if card.get("id") == model and isinstance(length, int) and not isinstance(length, bool):
                return length
        return None

    def chat_prompt_tokens(self, model: str, prompt: str) -> int:
        """The tokens of ``prompt`` as a chat request's (_chat_body) prompt, the server's chat template applied."""
        body = {"model": model, **_chat_prompt(prompt), "add_generation_prompt": True}
        response = self._request("POST", "/tokenize", json=body)
        if response.status_code != 200:
            raise NotVllmServer(
                f"{self.role} {self.url}/tokenize: HTTP {response.status_code} for a chat prompt: not a vLLM server"
            )
        count = self._json(response, "/tokenize").get("count")
        if not isinstance(count, int) or isinstance(count, bool):
            raise NotVllmServer(f"{self.role} {self.url}/tokenize: no token count: not a vLLM server")
        return count

    def complete_ids(
        self, model: str, prompt_ids: list[int], max_tokens: int, *, ignore_eos: bool = False
    ) -> Completion:
        """A non-streamed completion of a prompt given as token ids (the prefix-cache probe; with ``ignore_eos``
        exactly ``max_tokens`` tokens, the capacity probe)."""
        body = {"model": model, "prompt": prompt_ids, "max_tokens": max_tokens, "temperature": 0, "stream": False}
        if ignore_eos:
            body["ignore_eos"] = True
        start = time.perf_counter()
        response = self._request("POST", "/v1/completions", json=body)
        seconds = time.perf_counter() - start
        data = self._generation(response, "/v1/completions", model)
        usage = data.get("usage") or {}
        return Completion(
            text=data["choices"][0].get("text") or "",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            seconds=seconds,
        )

    def stream_chat(self, model: str, prompt: str, max_tokens: int, *, retry: bool = False) -> Streamed:
        """A streamed chat generation of exactly ``max_tokens`` tokens, with the usage chunk; with ``retry``,
        one whose usage counts no token is Retryable (the readiness check)."""
        body = _chat_body(model, prompt, max_tokens, stream=True)
        start = time.perf_counter()
        response = self._request("POST", "/v1/chat/completions", json=body, stream=True, retry=retry)
        ttft, itl, last, parts, usage = None, [], start, [], None
        with response:
            if response.status_code != 200:
                self._generation(response, "/v1/chat/completions", model, retry=retry)
            try:
                for chunk in _sse_chunks(response):
                    now = time.perf_counter()
                    choices = chunk.get("choices") or ()
                    if choices and _carries_token(choices[0]):
                        if ttft is None:
                            ttft = now - start
                        else:
                            itl.append(now - last)
                        last = now  # only token chunks advance the end (the usage chunk carries none)
                        parts.append((choices[0].get("delta") or {}).get("content") or "")
                    elif isinstance(chunk.get("usage"), dict):
                        usage = chunk["usage"]
                    elif isinstance(chunk.get("error"), dict):  # vLLM's own error event: the generation failed
                        failed = f"{self.role} {self.url}: the server ended the stream with an error: " + _said(
                            chunk["error"]
                        )
                        raise Retryable(failed) if retry else ServerUnreachable(failed)
            except requests.exceptions.RequestException as exc:
                if retry:
                    raise Retryable(f"{self.role} {self.url}: the stream broke ({_reason(exc)})") from None
                raise ServerUnreachable(f"{self.role} {self.url}: the stream broke ({_reason(exc)})") from None
        if usage is None:
            raise NotVllmServer(
                f"{self.role} {self.url}/v1/chat/completions: a streamed generation sent no usage chunk "
                "(stream_options.include_usage): not a vLLM OpenAI server"
            )
        tokens = int(usage.get("completion_tokens") or 0)
        if tokens == 0 and retry:
            raise Retryable(f"{self.role} {self.url}: a streamed generation ended with usage.completion_tokens 0")
        return Streamed(
            ttft_s=ttft,
            itl_s=tuple(itl),
            latency_s=(last - start) if ttft is not None else time.perf_counter() - start,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=tokens,
            text="".join(parts),
        )

    def _generation(self, response: requests.Response, path: str, model: str, *, retry: bool = False) -> dict:
        if response.status_code == 404 and "model" in response.text.lower():
            raise ModelNotServed(f"{self.role} {self.url}{path}: the server does not serve model {model!r}: --model")
        if response.status_code != 200:
            if retry:
                raise Retryable(f"{self.role} {self.url}{path}: HTTP {response.status_code}")
            raise NotVllmServer(
                f"{self.role} {self.url}{path}: HTTP {response.status_code}: {response.text[:200].strip()}"
            )
        data = self._json(response, path)
        if not data.get("choices"):
            raise NotVllmServer(f"{self.role} {self.url}{path}: no choices in the answer: not a vLLM OpenAI server")
        return data


def _chat_body(model: str, prompt: str, max_tokens: int, *, stream: bool) -> dict:
    """A chat request of exactly ``max_tokens`` output tokens at temperature 0 (ignore_eos and min_tokens, as
    vLLM's benchmark fixes its run lengths), thinking off where the template has the switch."""
    body = {
        "model": model,
        **_chat_prompt(prompt),
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def _chat_prompt(prompt: str) -> dict:
    """The prompt part of every chat request (and of its /tokenize): one user message, thinking off (GLM's and
    Qwen3's chat templates read this switch; others ignore it)."""
    return {"messages": [{"role": "user", "content": prompt}], "chat_template_kwargs": {"enable_thinking": False}}


def _said(error: dict) -> str:
    """The error event's message on one line (vLLM's stream error: ``{"error": {"message", "type", "code"}}``)."""
    message = " ".join(str(error.get("message") or error.get("type") or "no message").split())
    return message[:200] + (f" (code {error['code']})" if error.get("code") is not None else "")


def _sse_chunks(response: requests.Response) -> Iterator[dict]:
    """Each server-sent JSON chunk of a streamed generation (comments and [DONE] skipped)."""
    for line in response.iter_lines():
        if not line or not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            return
        try:
            chunk = json.loads(payload)
        except ValueError:
            continue
        if isinstance(chunk, dict):
            yield chunk


def _carries_token(choice: dict) -> bool:
    """vLLM's benchmark's test (``_choice_has_streamed_output``): a delta with content, reasoning or a tool call,
    or an empty content without a role (a token that decodes to nothing; the opening chunk carries the role)."""
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return False
    if delta.get("content") or delta.get("reasoning") or delta.get("tool_calls") or delta.get("function_call"):
        return True
    return delta.get("content") == "" and "role" not in delta


def _reason(exc: Exception) -> str:
    text = str(exc)
    for marker in (
        "Connection refused",
        "Name or service not known",
        "Connection reset",
        "timed out",
        "No route to host",
        "Temporary failure in name resolution",
    ):
        if marker in text:
            return marker.lower()
    return text.splitlines()[0][:160] if text else type(exc).__name__


def wait_until(deadline: float, attempt, *, interval_s: float = 2.0):
    """``attempt()`` until it returns without Retryable, or ServerUnreachable at ``deadline`` naming the first
    reason, what failed (a generation the engine ended with its error, say), then the last two other reasons,
    what the server did next (its API server gone: nothing answers)."""
    first, later = None, []
    while True:
        try:
            return attempt()
        except Retryable as exc:
            reason = str(exc)
            if first is None:
                first = reason
            elif reason != first:
                later = [r for r in later if r != reason][-1:] + [reason]
        if time.monotonic() + interval_s > deadline:
            said = "; then ".join([first, *later]) if first else "no attempt"
            raise ServerUnreachable(f"{said} (still, after the readiness timeout: --ready-timeout)")
        time.sleep(interval_s)
