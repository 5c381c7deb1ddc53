"""The ranks of a multi-node group agree before vLLM starts (stdlib only).

After its own check, every rank has a fingerprint (fingerprint.py) of what it is about to
serve. The leader (node rank 0) answers on ``--master-port`` + ``PORT_OFFSET``
(``GLM53_FINGERPRINT_PORT`` overrides), on every interface, in the foreground: a worker
POSTs its own fingerprint to ``/fingerprint?node_rank=R`` and gets the leader's back
(a GET gets it without sending one). The leader answers until every worker rank has sent
its own or the window (``GLM53_FINGERPRINT_TIMEOUT_S``) has passed, then closes the socket,
so the port is free and nothing is left running when vLLM is exec'd. vLLM's own rendezvous
waits for every rank anyway, so waiting for the workers here delays nothing; a worker that has
not fetched the leader's fingerprint when the window ends is a missing rank, and the leader
exits 28 naming it rather than wait in vLLM's rendezvous, whose timeout is far longer. Both sides
compare: a worker refuses with the first field that differs from its leader's, and the
leader with the first field of the first worker that differs from its own (exit 27), so
no rank is left waiting in vLLM's rendezvous for one that refused. A worker whose leader
never answers is exit 28 too.
"""

from __future__ import annotations

import http.server
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, Mapping, Optional

from geometry.image_contract import ContractError, read_image_labels
from geometry.preflight.fingerprint import IMAGE_DIGEST_ENV, Fingerprint, FingerprintUnreadable, first_difference
from geometry.preflight.launch import PORT_OFFSET, Launch
from geometry.preflight.outcome import (
    EXIT_BAD_MODE,
    EXIT_RANK_MISSING,
    EXIT_RANKS_DIFFER,
    EXIT_UNCHECKED,
    PASSED,
    PREFIX,
    Outcome,
    refused,
)

PORT_ENV = "GLM53_FINGERPRINT_PORT"
TIMEOUT_ENV = "GLM53_FINGERPRINT_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 600.0  # start the nodes within this of each other
PATH = "/fingerprint"
_RETRY_S = 0.2
_ATTEMPT_S = 2.0
_MAX_SENT = 1 << 20  # a fingerprint is a few KiB; a body above this is not one


class BadSetting(ValueError):
    """A GLM53_FINGERPRINT_* value that is not a port / a number of seconds (one line)."""


def fingerprint_port(launch: Launch, environ: Mapping[str, str]) -> int:
    raw = environ.get(PORT_ENV, "").strip()
    if not raw:
        return launch.master_port + PORT_OFFSET
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise BadSetting(f"{PORT_ENV}={raw!r} is not a TCP port (1-65535)")
    return int(raw)


def timeout_s(environ: Mapping[str, str]) -> float:
    raw = environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise BadSetting(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds above 0")
    return value


def with_image(
    fingerprint: Fingerprint, *, labels_path: str, overlay_manifest: Optional[str], environ: Mapping[str, str]
) -> Fingerprint:
    """``fingerprint`` with the image's labels (the build's file), its digest (the deployment's
    environment) and the overlay series the patch step applied (its manifest), where known."""
    from geometry.oracle.installed import read_manifest

    image = read_image_labels(labels_path)  # ContractError: the image's own file is corrupt
    series = None
    if overlay_manifest is not None:
        try:
            manifest = read_manifest(overlay_manifest)
        except ValueError:  # the check itself names an unreadable manifest where it reads one
            manifest = None
        series = manifest.series_sha256 if manifest is not None else None
    digest = environ.get(IMAGE_DIGEST_ENV, "").strip() or None
    return fingerprint.with_image(image.labels if image is not None else None, digest, series)


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return ", ".join(str(r) for r in ranks)


def _received(sent: bytes, where: str, not_json: str) -> Fingerprint:
    """The fingerprint another rank sent; FingerprintUnreadable (``not_json`` when it is no JSON at all)."""
    try:
        return Fingerprint.from_json(json.loads(sent), where)
    except FingerprintUnreadable:
        raise
    except (ValueError, UnicodeDecodeError):
        raise FingerprintUnreadable(not_json) from None


def _gib(value: int) -> str:
    return f"{value / 2**30:.2f} GiB"


def kv_pool_line(leader: Optional[int], workers: Mapping[int, Optional[int]]) -> Optional[str]:
    """What vLLM will plan every rank with: the smallest KV budget of the group's ranks (None: none known)."""
    budgets = {rank: b for rank, b in {0: leader, **workers}.items() if b is not None}
    if not budgets:
        return None
    smallest = min(budgets.values())
    if len(set(budgets.values())) == 1:
        return f"{PREFIX} KV budget: {_gib(smallest)} on every rank that sent one (node rank(s) {_ranks(budgets)})"
    rank = min(r for r, b in budgets.items() if b == smallest)
    here = f"; this rank has {_gib(leader)}" if leader is not None else ""
    return (
        f"{PREFIX} KV budget: the ranks' differ; vLLM plans every rank with the smallest, "
        f"{_gib(smallest)} ({smallest:,} B, node rank {rank}){here}"
    )


def offer(fingerprint: Fingerprint, launch: Launch, port: int, window_s: float, say: Callable[[str], None]) -> Outcome:
    """The leader: answer ``/fingerprint?node_rank=R`` until every worker rank sent its own or the window ends."""
    body = fingerprint.to_bytes()
    waiting = set(range(1, launch.nnodes))
    fetched: set[int] = set()
    sent_own: set[int] = set()
    differences: dict[int, str] = {}
    budgets: dict[int, Optional[int]] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = _ATTEMPT_S  # a client that opens and says nothing holds the leader no longer than this

        def _answer(self) -> Optional[int]:
            """Send the leader's fingerprint; the worker rank asking (None: not one this leader waits for)."""
            url = urllib.parse.urlsplit(self.path)
            if url.path != PATH:
                self.send_error(404)
                return None
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            rank = urllib.parse.parse_qs(url.query).get("node_rank", [""])[0]
            return int(rank) if rank.isdigit() and int(rank) in waiting else None

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            rank = self._answer()
            if rank is not None:
                fetched.add(rank)

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            length = self.headers.get("Content-Length", "")
            if not length.isdigit() or int(length) > _MAX_SENT:
                self.send_error(413 if length.isdigit() else 411)
                return
            sent = self.rfile.read(int(length))
            rank = self._answer()
            if rank is None:
                return
            fetched.add(rank)
            sent_own.add(rank)
            try:
                theirs = _received(
                    sent, f"node rank {rank}'s fingerprint", f"node rank {rank} sent no JSON fingerprint"
                )
            except FingerprintUnreadable as exc:
                differences[rank] = str(exc)
                return
            budgets[rank] = theirs.kv_cache_memory_bytes
            diff = first_difference(fingerprint, theirs)
            if diff is not None:
                differences[rank] = (
                    f"node rank {rank} differs from this leader at {diff.field}: "
                    f"leader {diff.here}, node rank {rank} {diff.there}"
                )

        def log_message(self, *args) -> None:  # the outcome lines say what happened
            pass

    try:
        server = http.server.HTTPServer(("", port), Handler)
    except OSError as exc:
        return refused(
            EXIT_RANK_MISSING,
            f"the leader cannot offer its fingerprint on port {port}: "
            f"{exc.strerror or exc} (set {PORT_ENV} to a free port on every node)",
        )
    say(
        f"{PREFIX} offering this rank's fingerprint to node rank(s) {_ranks(waiting)} on port {port} "
        f"(up to {window_s:g} s, {TIMEOUT_ENV})"
    )
    server.timeout = _RETRY_S
    deadline = time.monotonic() + window_s
    try:
        while fetched != waiting and time.monotonic() < deadline:
            server.handle_request()
    finally:
        server.server_close()
    if differences:
        first = min(differences)
        more = len(differences) - 1
        return refused(EXIT_RANKS_DIFFER, differences[first] + (f" (and {more} more node rank(s))" if more else ""))
    pool = kv_pool_line(fingerprint.kv_cache_memory_bytes, budgets)
    details = (pool,) if pool is not None else ()
    if fetched == waiting:
        unsent = waiting - sent_own
        return Outcome(
            PASSED,
            (
                f"{PREFIX} every worker (node rank(s) {_ranks(waiting)}) fetched the leader's "
                "fingerprint"
                + (
                    " and sent its own, the same"
                    if not unsent
                    else f"; node rank(s) {_ranks(unsent)} sent none (compared on their side only)"
                ),
                *details,
            ),
        )
    missing = waiting - fetched
    return refused(
        EXIT_RANK_MISSING,
        f"node rank(s) {_ranks(missing)} did not fetch the leader's fingerprint from port {port} within "
        f"{window_s:g} s ({TIMEOUT_ENV}): not started, not reaching this leader, or started with "
        "GLM53_PREFLIGHT=off (vLLM's own rendezvous would wait far longer)",
    )


def _url(launch: Launch, port: int) -> str:
    host = f"[{launch.master_addr}]" if ":" in launch.master_addr else launch.master_addr
    return f"http://{host}:{port}{PATH}?node_rank={launch.node_rank}"


class LeaderSilent(Exception):
    """The leader's fingerprint did not come within the timeout (the last error)."""


def fetch(launch: Launch, port: int, timeout: float, mine: bytes) -> bytes:
    """A worker: its own fingerprint ``mine`` sent, the leader's answer back, retried until ``timeout`` seconds."""
    request = urllib.request.Request(
        _url(launch, port), data=mine, method="POST", headers={"Content-Type": "application/json"}
    )
    url = request.full_url
    deadline = time.monotonic() + timeout
    last = "nothing tried"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LeaderSilent(last)
        try:
            with urllib.request.urlopen(request, timeout=max(0.05, min(_ATTEMPT_S, remaining))) as response:
                return response.read()
        except urllib.error.HTTPError as exc:  # something else answers on the port
            last = f"HTTP {exc.code} from {url}"
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            last = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
        time.sleep(min(_RETRY_S, max(0.0, deadline - time.monotonic())))


def compare(here: Fingerprint, answer: bytes, where: str, rank: int) -> Outcome:
    """A worker's verdict on the leader's answer."""
    try:
        leader = _received(answer, f"the leader's fingerprint ({where})", f"the leader's answer ({where}) is not JSON")
    except FingerprintUnreadable as exc:
        return refused(EXIT_RANKS_DIFFER, f"node rank {rank}: {exc}")
    diff = first_difference(here, leader)
    if diff is not None:
        return refused(
            EXIT_RANKS_DIFFER,
            f"node rank {rank} differs from its leader ({where}) at {diff.field}: "
            f"here {diff.here}, leader {diff.there}",
        )
    return Outcome(
        PASSED,
        (
            f"{PREFIX} ranks agree: node rank {rank}'s fingerprint is its leader's ({where}): "
            "image, overlay series, checkpoints, geometry and served flags",
        ),
    )


def agree(
    fingerprint: Optional[Fingerprint],
    launch: Launch,
    *,
    labels_path: str,
    overlay_manifest: Optional[str],
    environ: Mapping[str, str],
    say: Callable[[str], None],
) -> Outcome:
    """This rank's part: the leader answers and compares what each worker sends; a worker sends and compares."""
    try:
        port, window = fingerprint_port(launch, environ), timeout_s(environ)
    except BadSetting as exc:
        return refused(EXIT_BAD_MODE, str(exc))
    if fingerprint is None:
        return refused(
            EXIT_UNCHECKED,
            "this rank's check stopped before its geometry was known: no fingerprint to compare with the other ranks",
        )
    try:
        mine = with_image(fingerprint, labels_path=labels_path, overlay_manifest=overlay_manifest, environ=environ)
    except ContractError as exc:
        return refused(EXIT_UNCHECKED, f"the image's labels file is unusable: {exc}")
    if launch.leader:
        return offer(mine, launch, port, window, say)
    where = f"{launch.master_addr}:{port}"
    try:
        answer = fetch(launch, port, window, mine.to_bytes())
    except LeaderSilent as exc:
        return refused(
            EXIT_RANK_MISSING,
            f"node rank {launch.node_rank}: the leader's fingerprint did not come "
            f"from {where} within {window:g} s (last: {exc}); is the leader started "
            f"with GLM53_PREFLIGHT on? ({TIMEOUT_ENV} sets the wait)",
        )
    return compare(mine, answer, where, launch.node_rank)
