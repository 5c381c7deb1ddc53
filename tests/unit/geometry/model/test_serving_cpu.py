"""geometry/model/serving_cpu.py: the serving CPU's AVX512-BF16, read from /proc/cpuinfo."""

from __future__ import annotations

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
