"""The one fact about a serving CPU that moves vLLM's KV geometry on its CPU platform (stdlib only).

``CpuPlatform.check_and_update_config`` asks ``torch.cpu._is_avx512_bf16_supported()``: on a CPU with
AVX512-BF16 it resets ``mamba_ssm_cache_dtype`` "auto" to float32 (the accelerated GDN kernels'
state), so a GDN layer's temporal state page doubles; without it the state stays in the model dtype.
A GPU family is never asked. The build reads the fact off the machine it runs on, the image's
pre-flight off the machine it starts on; the gate input carries it (``cpu_avx512_bf16``).
"""

from __future__ import annotations

from pathlib import Path

from geometry.kv.backends import CPU_FAMILY

CPUINFO = Path("/proc/cpuinfo")
# The kernel's name for CPUID.(EAX=7,ECX=1):EAX[5], the bit cpuinfo (torch's reader) tests.
AVX512_BF16_FLAG = "avx512_bf16"


def has_avx512_bf16(cpuinfo: Path | None = None) -> bool:
    """Whether this machine's CPU (``cpuinfo``: CPUINFO) has AVX512-BF16: its ``flags`` line in
    /proc/cpuinfo names it (an arm64 host has no such line; a host without the file is taken as without)."""
    try:
        text = (cpuinfo or CPUINFO).read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return AVX512_BF16_FLAG in value.split()
    return False


def serving_cpu_avx512_bf16(capability_family: int) -> bool:
    """The gate input's ``cpu_avx512_bf16`` for a deployment served here: this CPU's answer on vLLM's
    CPU platform, False on a GPU family (not asked)."""
    return capability_family == CPU_FAMILY and has_avx512_bf16()
