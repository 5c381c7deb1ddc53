"""The qualify result file: what its one writer writes its one reader reads back as the same value, and a file
that is not such a result (unreadable, not JSON, another schema, any key missing or of the wrong kind) is one
line naming the file and the key, exit 2; `--baseline-result` reads it before anything is measured."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.repo import REPO

from geometry import Behaviour
from stackbuild.core.errors import QualifyResultInvalid
from stackbuild.serve.qualify import result_file
from stackbuild.serve.qualify.result import (
    SCHEMA,
    ClassThroughput,
    Expectation,
    KvCacheCheck,
    KvFigure,
    Latency,
    PrefixCacheProbe,
    ProbeSizing,
    Qualification,
    Sizing,
    SpecDecode,
    Throughput,
)
from stackbuild.serve.qualify.sanity import OutputCheck


def throughput(url: str, tok_s: float, speculation: bool) -> Throughput:
    lat = Latency(samples=4, mean_ms=12.5, median_ms=11.0, p99_ms=30.25)
    none = Latency(samples=0, mean_ms=None, median_ms=None, p99_ms=None)
    prose = ClassThroughput("prose", 4, 128, 0.5, 256.0, 4, lat, lat, lat)
    code = ClassThroughput("code", 4, 128, 0.25, 512.0, 4, lat, none, lat)
    return Throughput(url, "tiny", 1.5, 32, (prose, code), tok_s, lat, lat, none, speculation)


def sample(model: str = "tiny") -> Qualification:
    figures = (
        KvFigure("num_gpu_blocks", 8192, 8192, "/metrics", True),
        KvFigure("group_block_sizes", (128, 256), None, "--server-log stdin", False),
    )
    return Qualification(
        schema=SCHEMA,
        url="http://127.0.0.1:8000",
        model=model,
        recipe="tests/recipes/cpu-tiny/recipe.yaml",
        vllm_version=None,
        sizing=Sizing(1024, 2000, 994, ("code: Write a C function ... (1,024 tokens)",), ("a notice",)),
        kv_cache=KvCacheCheck("r", Behaviour.STOCK, "0.33.0", None, "CPU", figures, ("a difference",)),
        served=throughput("http://127.0.0.1:8000", 341.25, True),
        baseline=None,
        baseline_source=None,
        speedup=None,
        spec_decode=SpecDecode(True, 10, 30, 12, 0.4, 2.2, (6, 4, 2), (0.6, 0.4, 0.2), True),
        prefix_cache=PrefixCacheProbe(
            True, 128, "recipe gate", ProbeSizing.SIZED, 16, 7, "sized", 896, 896, 0, 896, 900
        ),
        outputs=(OutputCheck("prose", 32, 40, False, False, True, "the the the"),),
        expectations=(Expectation("qualify.min_acceptance", 0.5, 0.4, False),),
        failures=(),
        warnings=("w",),
    )


def test_what_the_writer_writes_the_reader_reads_back(tmp_path):
    result = sample()
    path = result_file.write(result, tmp_path / "qualify.json")
    back = result_file.read(path)
    assert back == result and back.prefix_cache.sizing is ProbeSizing.SIZED
    assert back.kv_cache.behaviour is Behaviour.STOCK and back.kv_cache.figures[1].predicted == (128, 256)
    assert back.served.classes[1].tpot.mean_ms is None
    # --json's output (passed, and attached with --attach) is read too: its record is the same
    printed = {**result.to_json(), "attached": {"image": "r@sha256:" + "0" * 64}}
    assert result_file.from_json(json.loads(json.dumps(printed))) == result


def leaves(data, path=""):
    """Every key path of a JSON document down to its scalars (a list's items by index)."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from leaves(v, f"{path}.{k}" if path else k)
    elif isinstance(data, list) and data:
        for i, v in enumerate(data):
            yield from leaves(v, f"{path}[{i}]")
    else:
        yield path


def put(data, path: str, value):
    """``data`` with the value at ``path`` replaced (``value`` None: the key removed)."""
    import re

    parts = [int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", path)]
    node = data
    for p in parts[:-1]:
        node = node[p]
    if value is None:
        del node[parts[-1]]
    else:
        node[parts[-1]] = value


DOCUMENT = json.loads(json.dumps(sample().to_json()))
LEAVES = sorted(p for p in leaves(DOCUMENT) if p != "passed")  # passed: derived, read past


@given(path=st.sampled_from(LEAVES), drop=st.booleans())
@settings(max_examples=150, deadline=None)
def test_any_key_missing_or_of_the_wrong_kind_is_named(tmp_path_factory, path, drop):
    if drop and path.endswith("]"):
        drop = False  # a list one item shorter is still a list: put a wrong item instead
    data = json.loads(json.dumps(DOCUMENT))
    put(data, path, None if drop else {"a": 1})  # an object: no leaf of the result is one
    file = tmp_path_factory.mktemp("r") / "base.json"
    file.write_text(json.dumps(data))
    with pytest.raises(QualifyResultInvalid) as bad:
        result_file.read(file)
    line = str(bad.value)
    # the key named is the one at fault (an optional record given an object is read as that record: its keys)
    assert line.startswith(f"--baseline-result {file}: {path}") and "\n" not in line, line
    assert line.endswith(f"not a qualify result of schema {SCHEMA}") or path == "schema"
    assert bad.value.exit_code == 2


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (None, "unreadable (no such file or directory)"),
        ("", "not JSON (line 1)"),
        ("[1, 2]", "(top level): not a JSON object"),
        (json.dumps({**DOCUMENT, "schema": "glm53.qualify/v2"}), f"schema: 'glm53.qualify/v2', expected '{SCHEMA}'"),
        (json.dumps({**DOCUMENT, "extra": 1}), "extra: not a key of the result"),
        (
            json.dumps({**DOCUMENT, "prefix_cache": {**DOCUMENT["prefix_cache"], "sizing": "big"}}),
            "prefix_cache.sizing: 'big', expected one of",
        ),
    ],
)
def test_a_file_that_is_not_a_result_is_one_line(tmp_path, text, said):
    file = tmp_path / "base.json"
    if text is not None:
        file.write_text(text)
    with pytest.raises(QualifyResultInvalid) as bad:
        result_file.read(file)
    assert str(bad.value).startswith(f"--baseline-result {file}: {said}") and "\n" not in str(bad.value)


def test_a_directory_or_binary_file_is_one_line(tmp_path):
    with pytest.raises(QualifyResultInvalid, match=r"unreadable \(is a directory\)$"):
        result_file.read(tmp_path)
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(QualifyResultInvalid, match=r"unreadable \(UnicodeDecodeError\)$"):
        result_file.read(tmp_path / "bin")


def qualify(*args):
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), "qualify", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def test_the_cli_reads_it_before_anything_is_measured(tmp_path):
    # nothing listens at the URL: a measurement would exit 20; the file's fault is 2, first
    (tmp_path / "base.json").write_text(json.dumps({**DOCUMENT, "model": 3}))
    r = qualify("--url", "http://127.0.0.1:1", "--baseline-result", str(tmp_path / "base.json"))
    assert (
        r.returncode == 2
        and r.stderr
        == f"error: --baseline-result {tmp_path / 'base.json'}: model: not a string: "
        f"not a qualify result of schema {SCHEMA}\n"
    ), r.stderr
    r = qualify(
        "--url", "http://127.0.0.1:1", "--baseline-url", "http://127.0.0.1:2", "--baseline-result", str(tmp_path)
    )
    assert r.returncode == 2 and r.stderr == (
        "error: --baseline-url and --baseline-result: give one baseline, not both\n"
    ), r.stderr
