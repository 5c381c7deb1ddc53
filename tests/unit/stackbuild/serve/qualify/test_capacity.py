"""`qualify --capacity`'s reading of a server: /v1/models' max_model_len and /metrics' gauges, counter and
cache config, from a local HTTP stand-in that serves vLLM's own text; the probes' arithmetic on figures
written by hand (tests/e2e/serve/test_capacity_cpu_hybrid.py holds the probe to live servers)."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from stackbuild.core.errors import CapacityDiffers, NotVllmServer, UsageError
from stackbuild.serve.qualify import capacity as C
from stackbuild.serve.qualify.client import Server

# /metrics as vLLM's Prometheus exporter writes these families (two engines: the gauges and the counter sum).
METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny-hybrid"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny-hybrid"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny-hybrid"} 1.0
vllm:num_requests_waiting{engine="1",model_name="tiny-hybrid"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny-hybrid"} 0.75
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny-hybrid"} 2.0
vllm:num_preemptions_total{engine="1",model_name="tiny-hybrid"} 1.0
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_sum{engine="0",model_name="tiny-hybrid"} 9000.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="tiny-hybrid"} 40.0
vllm:iteration_tokens_total_count{engine="0",model_name="tiny-hybrid"} 40.0
vllm:iteration_tokens_total_sum{engine="1",model_name="tiny-hybrid"} 100.0
vllm:iteration_tokens_total_bucket{engine="1",le="+Inf",model_name="tiny-hybrid"} 2.0
vllm:iteration_tokens_total_count{engine="1",model_name="tiny-hybrid"} 2.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="256",engine="0",num_gpu_blocks="120"} 1.0
"""
MODELS = {"object": "list", "data": [{"id": "tiny-hybrid", "object": "model", "max_model_len": 8192}]}


class Stub(http.server.BaseHTTPRequestHandler):
    pages: dict = {}

    def do_GET(self):
        body = self.pages.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write((body or "").encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def stub():
    handler = type("Handler", (Stub,), {"pages": {"/metrics": METRICS, "/v1/models": json.dumps(MODELS)}})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()


def test_the_metrics_gauges_counter_and_pool_are_read_and_summed_over_engines(stub):
    url, _ = stub
    text = Server(url).metrics_text()
    s = C.sample(text, 1.5, "stub")
    assert (s.t, s.running, s.waiting, s.preemptions, s.kv_usage, s.steps) == (1.5, 5, 1, 3, 0.75, 42)
    assert C.num_gpu_blocks(text) == 120


def test_a_server_that_counts_no_steps_gives_none(stub):
    url, handler = stub
    handler.pages["/metrics"] = "\n".join(line for line in METRICS.splitlines() if "iteration_tokens" not in line)
    assert C.sample(Server(url).metrics_text(), 0.0, "stub").steps is None


def test_max_model_len_is_the_models_card(stub):
    url, _ = stub
    assert Server(url).max_model_len("tiny-hybrid") == 8192
    assert Server(url).max_model_len("other") is None


def test_metrics_without_the_gauges_are_not_vllm(stub):
    url, handler = stub
    handler.pages["/metrics"] = "# TYPE other gauge\nother 1.0\n"
    with pytest.raises(NotVllmServer, match="vllm:num_requests_running"):
        C.sample(Server(url).metrics_text(), 0.0, "stub")


def _s(t, running, waiting, preemptions, steps=None):
    return C.Sample(t, running, waiting, preemptions, 0.5, steps)


def test_the_live_peak_is_counted_before_the_first_preemption():
    samples = [_s(0, 0, 0, 4), _s(1, 3, 2, 4), _s(2, 4, 1, 4), _s(3, 5, 0, 5), _s(4, 2, 0, 5)]
    got = C.live(samples, 4.0)
    assert (got.peak_running, got.preemptions, got.max_waiting) == (4, 1, 2)
    assert got.poll_steps is None  # the server counts no steps


def test_the_polls_spacing_is_read_up_to_the_first_poll_that_saw_a_preemption():
    # Steps 10 -> 13 -> 20 -> 29 (the preemption seen) -> 100 (after it: not the stretch the peak is read from).
    samples = [
        _s(0, 0, 0, 1, 10),
        _s(0.1, 3, 1, 1, 13),
        _s(0.5, 4, 0, 1, 20),
        _s(0.7, 3, 1, 2, 29),
        _s(3.0, 1, 0, 2, 100),
    ]
    got = C.live(samples, 3.0)
    assert got.poll_steps == 9 and got.poll_s == pytest.approx(0.4)
    # One poll of the stretch without a step count: the spacing in steps is unknown.
    assert C.live([*samples[:2], _s(0.5, 4, 0, 1, None), *samples[3:]], 3.0).poll_steps is None


def _probe(sent, peak, preempted_at, live_peak, live_preemptions, gate_peak_steps=None, poll_steps=None):
    live = C.Live(live_peak, live_preemptions, 0, 0.5, 1.0, (), 0.1, poll_steps)
    return C.Probe(sent, peak, preempted_at, live, gate_peak_steps)


def _capacity(gate_count, *probes):
    return C.Capacity("d", "u", "m", "stock", 6000, 200, 8192, 120, gate_count, tuple(probes))


def test_a_live_peak_other_than_the_gates_names_both_numbers_and_exits_33():
    result = _capacity(4, _probe(5, 4, None, 3, 0))
    (line,) = result.differences
    assert "5 requests" in line and "ran 3 together" in line and "predicts 4" in line
    with pytest.raises(CapacityDiffers) as exc:
        C.raise_if_differs(result)
    assert exc.value.exit_code == 33
    assert not _capacity(4, _probe(5, 4, None, 4, 0)).differences
    assert len(_capacity(4, _probe(5, 4, 17, 4, 0)).differences) == 1  # the gate preempts, the server did not


def test_a_peak_held_for_fewer_steps_than_the_polls_are_apart_is_unresolved_not_a_difference():
    # The gate's 4 run together for 6 steps; the server ran up to 9 steps between two polls and showed 3.
    short = _capacity(4, _probe(4, 4, None, 4, 0, 500, 9), _probe(5, 4, None, 3, 0, 6, 9))
    assert not short.differences and short.live_requests_at_once == 4
    (line,) = short.unresolved
    assert "hold for 6 step(s)" in line and "up to 9 steps" in line and "seen: 3" in line
    assert "NOT RESOLVED" in short.text() and short.to_json()["unresolved"] == [line]
    C.raise_if_differs(short)  # exit 0
    # Polls as far apart as the peak holds resolve it: the same 3 is a difference.
    assert len(_capacity(4, _probe(4, 4, None, 4, 0, 500, 6), _probe(5, 4, None, 3, 0, 6, 6)).differences) == 1
    # A server that counts no steps: compared as seen.
    assert len(_capacity(4, _probe(4, 4, None, 4, 0, 500), _probe(5, 4, None, 3, 0, 6)).differences) == 1
    # More running than the gate's peak is never unresolved, however far apart the polls.
    more = _capacity(4, _probe(4, 4, None, 4, 0, 500, 900), _probe(5, 4, None, 5, 0, 6, 900))
    assert not more.unresolved and len(more.differences) == 1


def test_a_probe_the_polls_did_not_resolve_is_sent_again_and_the_last_send_kept():
    def sends(*poll_steps):
        lives = iter(C.Live(3, 0, 0, 0.5, 1.0, (), 0.1, steps) for steps in poll_steps)
        return lambda: next(lives)

    def judged(live, attempt):
        return C.Probe(5, 4, None, live, 6, attempt)

    # Missed once (9 steps between polls, the peak holds 6), then resolved: kept, and it differs.
    second = C.until_resolved(sends(9, 6, 1), judged)
    assert (second.attempts, second.live.poll_steps, second.peak_unresolved) == (2, 6, False)
    # Never resolved: PROBE_ATTEMPTS sends, the last kept, unresolved.
    never = C.until_resolved(sends(*[9] * C.PROBE_ATTEMPTS), judged)
    assert (never.attempts, never.peak_unresolved) == (C.PROBE_ATTEMPTS, True)
    assert f"attempt {C.PROBE_ATTEMPTS}" in never.line()


def test_the_servers_requests_at_once_is_bracketed_by_the_two_probes():
    # 4 sent all ran, 5 sent: one waited (4 ran) -> the server holds 4 at once, as the gate says.
    agree = _capacity(4, _probe(4, 4, None, 4, 0), _probe(5, 4, None, 4, 0))
    assert agree.live_requests_at_once == 4 and not agree.differences
    # 5 sent: all five ran until a preemption -> still 4 (not all ran without one).
    assert _capacity(4, _probe(4, 4, None, 4, 0), _probe(5, 5, 30, 5, 1)).live_requests_at_once == 4
    # The server ran 4 of the 4 only until a preemption: the probes do not bracket a count, and it differs.
    short = _capacity(4, _probe(4, 4, None, 4, 1), _probe(5, 4, None, 4, 0))
    assert short.live_requests_at_once is None
    assert any("preempted 1 time(s)" in d for d in short.differences)
    # The server ran all 5: more than the gate's 4, and both probes name their difference.
    more = _capacity(4, _probe(4, 4, None, 4, 0), _probe(5, 4, None, 5, 0))
    assert more.live_requests_at_once is None and len(more.differences) == 1
    # One request that cannot run alone: the count is 0.
    assert _capacity(0, _probe(1, 0, None, 0, 0)).live_requests_at_once == 0


def test_the_probes_are_the_gates_count_and_one_more_within_the_bounds():
    assert C.sent_counts(4, None) == (4, 5)
    assert C.sent_counts(0, None) == (1,)
    assert C.sent_counts(None, None) == (1,)
    assert C.sent_counts(C.MAX_REQUESTS, None) == (C.MAX_REQUESTS,)
    assert C.sent_counts(4, 9) == (9,)


def test_the_result_file_names_its_schema_and_each_probes_outcome(tmp_path):
    result = _capacity(4, _probe(4, 4, None, 4, 0), _probe(5, 5, 30, 5, 1))
    data = result.to_json()
    assert data["schema"] == C.SCHEMA and data["live_requests_at_once"] == 4
    assert [p["all_ran"] for p in data["probes"]] == [True, False]
    assert C.figure(result, tmp_path / C.FIGURE_NAME).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_probe_beyond_the_bounds_is_refused_before_anything_is_sent():
    with pytest.raises(UsageError, match="max_model_len 8,192"):
        C.check_request(8000, 200, 2, 8192)
    with pytest.raises(UsageError, match="between 1 and 64"):
        C.check_request(100, 10, 65, 8192)
