"""geometry/model/serving_cpu.py: the serving CPU's AVX512-BF16, read from /proc/cpuinfo."""

from __future__ import annotations

import cpu_hybrid_cases as H
import pytest

from geometry.kv.backends import CPU_FAMILY
from geometry.model import serving_cpu
from geometry.model.serving_cpu import has_avx512_bf16, serving_cpu_avx512_bf16

X86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx2 avx512f {extra} avx512_vnni\n\n"
ARM64 = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes sha2 bf16 i8mm\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (X86.format(extra="avx512_bf16 amx_bf16"), True),
        (X86.format(extra=""), False),
        (X86.format(extra="avx512_bf16x"), False),  # a whole flag, not a prefix
        (ARM64, False),  # arm64 names bf16 under Features: vLLM's x86 kernels are not asked
        ("", False),
    ],
)
def test_the_flag_is_read_from_the_flags_line(tmp_path, text, expected):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    assert has_avx512_bf16(cpuinfo) is expected


def test_a_host_without_cpuinfo_has_no_avx512_bf16(tmp_path):
    assert has_avx512_bf16(tmp_path / "missing") is False


def test_a_gpu_family_is_never_asked(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(X86.format(extra="avx512_bf16"))
    monkeypatch.setattr(serving_cpu, "CPUINFO", cpuinfo)
    assert serving_cpu_avx512_bf16(100) is False
    assert serving_cpu_avx512_bf16(CPU_FAMILY) is True


@pytest.fixture(params=H.CPU_KINDS, ids=H.CPU_KIND_IDS)
def this_cpu(request, monkeypatch, tmp_path) -> bool:
    """This machine read as a CPU without, then with AVX512-BF16; the value is which."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(X86.format(extra="avx512_bf16" if request.param else ""))
    monkeypatch.setattr(serving_cpu, "CPUINFO", cpuinfo)
    return request.param


def test_the_start_check_takes_the_cpu_it_starts_on_not_the_builds(this_cpu):
    """An image built (and gated) on one CPU that starts on another: the pre-flight's defaults are the
    starting machine's, so its gate plans the GDN state vLLM will run there."""
    from geometry.model.inputs import GeometryInputs
    from geometry.preflight.check import build_defaults

    built = GeometryInputs.from_json(H.gate_input(4, cpu_avx512_bf16=not this_cpu))
    assert build_defaults(built, 1 << 30).cpu_avx512_bf16 is this_cpu


def test_build_py_takes_the_cpu_it_runs_on(this_cpu):
    from stackbuild.core.gate import gate_input
    from stackbuild.core.recipe import load_recipe

    assert gate_input(load_recipe(H.RECIPE_DIR / "recipe.yaml")).cpu_avx512_bf16 is this_cpu
