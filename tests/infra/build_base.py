#!/usr/bin/env python3
"""Build, tag and push the synthetic stand-ins for vllm/vllm-openai:vVERSION, VERSION the vLLM
requirements/vllm.txt pins (the default release).

    build_base.py --arch amd64|arm64      the shared Debian bookworm minbase rootfs (rootfs.py)
                                          + that vLLM's real Python tree + CPU torch
                                          + the pure-Python packages its KV-cache code imports,
                                          in /usr/local/lib/python3.11/dist-packages.
    build_base.py --wrong-version         FROM the amd64 base, vLLM's METADATA says 0.32.1.
    build_base.py --all                   all three.

Images (REGISTRY = 127.0.0.1:5000 unless INFRA_REGISTRY_ADDR):
    amd64  REGISTRY/vllm/vllm-openai:vVERSION-amd64
    arm64  REGISTRY/vllm/vllm-openai:vVERSION          (config architecture arm64)
    wrong  REGISTRY/vllm/vllm-openai:v0.32.1-synthetic

Each image is pushed to the local registry (credentials from the services.sh
state file) and {"reference","digest","arch",...} is written to
$INFRA_STATE_DIR/base-<name>.json.  The rootfs and Python layer tarballs,
wheels and the resolved package list are cached under $INFRA_CACHE_DIR
(default <repo>/.cache/infra), each under a key of its inputs; an image whose
label records the same input hash is not rebuilt, only pushed.  The layers are
pushed to the registry with their own config (image_publish.py), so the arm64
config says arm64, which `docker import` would not, and pulled into the engine.

Entrypoint: ["vllm", "serve"], where /usr/local/bin/vllm is a small stub (the real
CLI needs the CUDA build); `vllm --version` prints the installed vLLM version.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bytecode  # tests/infra, this script's directory
import harness
import rootfs
from image_archive import LAYER_PARTS, ImageConfig, Layer, layer_files, write_layers
from image_publish import publish_image, registry_holds

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
STATE_DIR = harness.state_dir()
CACHE_DIR = harness.CACHE_DIR
REGISTRY = os.environ.get("INFRA_REGISTRY_ADDR", "127.0.0.1:5000")
REPOSITORY = f"{REGISTRY}/vllm/vllm-openai"


def _pin(name: str) -> str:
    """NAME's version in requirements/vllm.txt (``NAME==VERSION``)."""
    for line in (REPO / "requirements" / "vllm.txt").read_text().splitlines():
        if line.startswith(f"{name}=="):
            return line.split("==", 1)[1].strip()
    raise SystemExit(f"[build_base] requirements/vllm.txt pins no {name}")


VLLM_VERSION = _pin("vllm")
WRONG_VLLM_VERSION = "0.32.1"
PY_MM = "3.11"
SITE = f"usr/local/lib/python{PY_MM}/dist-packages"
LAYOUT_VERSION = 4
LABEL_HASH = "org.glm53.test.input-hash"
LABEL_KIND = "org.glm53.test.synthetic-base"
GATE_MODULES = [
    "vllm.v1.core.kv_cache_planning",
    "vllm.v1.kv_cache_interface",
    "vllm.platforms.interface",
    "vllm.model_executor.layers.mamba.mamba_utils",
]

ARCHES = {
    "amd64": {"machine": "x86_64", "torch": _pin("torch"), "tag": f"v{VLLM_VERSION}-amd64"},
    "arm64": {"machine": "aarch64", "torch": "2.9.1", "tag": f"v{VLLM_VERSION}"},
}
WRONG_TAG = f"v{WRONG_VLLM_VERSION}-synthetic"

# Never installed from the resolved dependency closure: torch comes pinned with
# --no-deps; the rest are GPU-only weights the KV-cache imports do not need.
EXCLUDE = re.compile(r"^(torch|triton|pytorch-triton.*|nvidia-.*|cuda-.*|vllm)$")
# import name -> distribution, for discovering what an import still misses.
MODULE_DIST = {
    "yaml": "pyyaml",
    "zmq": "pyzmq",
    "PIL": "pillow",
    "cpuinfo": "py-cpuinfo",
    "google": "protobuf",
    "cv2": "opencv-python-headless",
    "pydantic_core": "pydantic",
    "openai_harmony": "openai-harmony",
    "typing_extensions": "typing-extensions",
    "jinja2": "jinja2",
    "sklearn": "scikit-learn",
    "attr": "attrs",
}

VLLM_STUB = """#!/usr/bin/python3
# Stand-in for vLLM's console script in the synthetic test base (the real CLI
# needs the CUDA build). `vllm --version` prints the installed vLLM version.
import sys
from importlib.metadata import version
args = sys.argv[1:]
if args[:1] in (["--version"], ["-v"]):
    print(version("vllm"))
    sys.exit(0)
print("vllm stub (synthetic test base, vLLM %s): %s" % (version("vllm"), " ".join(args)))
sys.exit(0)
"""


def log(msg: str) -> None:
    print(f"[build_base] {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw) -> subprocess.CompletedProcess:
    shown = " ".join(str(c) for c in cmd)
    shown = re.sub(r"(--platform \S+ )+", "--platform <manylinux tags> ", shown)
    log("$ " + (shown if len(shown) < 600 else shown[:600] + " ..."))
    kw.setdefault("check", True)
    return subprocess.run([str(c) for c in cmd], **kw)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def req_name(line: str) -> str:
    return normalize(re.split(r"[<>=!~;\[ @]", line, 1)[0])


def _req_lines(path: Path) -> list[str]:
    lines = []
    if path.exists():
        for raw in path.read_text().splitlines():
            line = raw.split("#", 1)[0].strip()
            if line and not line.startswith("-") and not EXCLUDE.match(req_name(line)):
                lines.append(line)
    return lines


def read_requirements() -> tuple[list[str], dict[str, str]]:
    """(requirements resolved with their dependencies, exact pins laid over the result).

    base-requirements.txt (+ discovered-requirements.txt) are resolved for the target
    platform; requirements/oracle.txt lines pinned with == replace the resolved version
    of that package (or add it), as the oracle venv installs them (--no-deps), so the
    oracle's pin list never makes the resolution impossible. Unpinned oracle lines
    join the resolution.
    """
    resolve_set: dict[str, str] = {}
    for line in _req_lines(HERE / "base-requirements.txt") + _req_lines(CACHE_DIR / "discovered-requirements.txt"):
        resolve_set.setdefault(req_name(line), line)
    overrides: dict[str, str] = {}
    for line in _req_lines(REPO / "requirements" / "oracle.txt"):
        name = req_name(line)
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*==\s*([^\s;,]+)", line)
        if m:
            overrides[name] = f"{m.group(1)}=={m.group(2)}"
            resolve_set.pop(name, None)
        else:
            resolve_set[name] = line
    return [resolve_set[k] for k in sorted(resolve_set)], dict(sorted(overrides.items()))


def platform_args(arch: str) -> list[str]:
    machine = ARCHES[arch]["machine"]
    plats = [f"manylinux_2_{v}_{machine}" for v in range(36, 4, -1)]
    plats += [f"manylinux2014_{machine}"]
    if machine == "x86_64":
        plats += [f"manylinux2010_{machine}", f"manylinux1_{machine}"]
    plats += [f"linux_{machine}"]
    args = []
    for p in plats:
        args += ["--platform", p]
    return args + ["--python-version", PY_MM, "--implementation", "cp", "--only-binary=:all:"]


def pip(*args) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]


# ------------------------------------------------------------------ python layer
def resolve(arch: str, reqs: list[str]) -> list[str]:
    """Pinned name==version closure of reqs for arch (torch, triton, nvidia-* left out)."""
    key = hashlib.sha256(json.dumps([arch, reqs, ARCHES[arch]["torch"]]).encode()).hexdigest()[:16]
    cached = CACHE_DIR / "resolved" / f"{arch}-{key}.txt"
    if cached.exists():
        return cached.read_text().split()
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        rfile, cfile, report = Path(tmp) / "r.txt", Path(tmp) / "c.txt", Path(tmp) / "report.json"
        rfile.write_text("\n".join(reqs) + "\n")
        cfile.write_text(f"torch=={ARCHES[arch]['torch']}\n")
        run(
            pip(
                "install",
                "-q",
                "--dry-run",
                "--ignore-installed",
                "--report",
                report,
                "--target",
                Path(tmp) / "t",
                *platform_args(arch),
                "-r",
                rfile,
                "-c",
                cfile,
            )
        )
        data = json.loads(report.read_text())
    pins = sorted(
        f"{i['metadata']['name']}=={i['metadata']['version']}"
        for i in data["install"]
        if not EXCLUDE.match(normalize(i["metadata"]["name"]))
    )
    cached.write_text("\n".join(pins) + "\n")
    return pins


def download(arch: str, specs: list[str]) -> Path:
    wheels = CACHE_DIR / "wheels" / arch
    wheels.mkdir(parents=True, exist_ok=True)
    have = {normalize(p.name.split("-")[0]) + "==" + p.name.split("-")[1] for p in wheels.glob("*.whl")}

    def present(spec: str) -> bool:
        name, _, ver = spec.partition("==")
        n = normalize(name)
        return any(
            h.startswith(n + "==") and (h.split("==")[1] == ver or h.split("==")[1].split("+")[0] == ver) for h in have
        )

    missing = [s for s in specs if not present(s)]
    if missing:
        run(pip("download", "-q", "--no-deps", "-d", wheels, *platform_args(arch), *missing))
    return wheels


def python_layers_cached(arch: str, reqs: tuple[list[str], dict[str, str]], ihash: str) -> list[Path]:
    """The Python layers for these inputs: from $INFRA_CACHE_DIR/layers, else built there."""
    out = CACHE_DIR / "layers" / f"python-{arch}-{ihash[:16]}"
    if out.exists():
        log(f"python layers cached: {out}")
        return layer_files(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix=f"python-{arch}-", dir=out.parent) as tmp:
        layers = python_layers(arch, reqs, Path(tmp), out)
    log(f"python layers {arch} built in {time.time() - t0:.0f} s")
    return layers


def python_layers(arch: str, reqs: tuple[list[str], dict[str, str]], workdir: Path, out: Path) -> list[Path]:
    to_resolve, overrides = reqs
    resolved = {normalize(p.split("==")[0]): p for p in resolve(arch, to_resolve)}
    resolved.update(overrides)
    pins = [resolved[k] for k in sorted(resolved)]
    core = [f"torch=={ARCHES[arch]['torch']}", f"vllm=={VLLM_VERSION}"]
    wheels = download(arch, pins + core)
    stage = workdir / "stage"
    site = stage / SITE
    site.mkdir(parents=True)
    run(
        pip(
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--find-links",
            wheels,
            "--no-compile",
            "--target",
            site,
            *platform_args(arch),
            *pins,
            *core,
        )
    )
    # target installs may leave console scripts here; the image has its own stub
    shutil.rmtree(site / "bin", ignore_errors=True)
    # Prune what the KV-cache classes never load: vLLM's compiled kernels (CUDA),
    # torch's headers and cmake files, test trees.
    pruned = 0
    for so in (site / "vllm").rglob("*.so"):
        pruned += so.stat().st_size
        so.unlink()
    for sub in ("torch/include", "torch/share/cmake", "torch/test", "caffe2"):
        p = site / sub
        if p.exists():
            shutil.rmtree(p)
    log(f"pruned {pruned >> 20} MiB of vLLM .so files")
    # Byte-compiled on the host (the same CPython 3.11 bytecode for both arches): a cold import
    # of vLLM + torch otherwise compiles ~2k modules inside every container, which under qemu
    # costs minutes. The arm64 base walks its tree backward (bytecode.py: the two build at once).
    if sys.version_info[:2] == tuple(int(x) for x in PY_MM.split(".")):
        t0 = time.time()
        done = bytecode.compile_tree(stage, SITE, reverse=arch == "arm64")
        log(f"byte-compiled in {time.time() - t0:.0f} s ({done.compiled} compiled, {done.cached} from the cache)")
    else:
        log(f"host python is not {PY_MM}: images are left without .pyc files (slower first import)")
    binp = stage / "usr/local/bin"
    binp.mkdir(parents=True)
    (binp / "vllm").write_text(VLLM_STUB)
    (binp / "vllm").chmod(0o755)
    layers = write_layers(stage, SITE, out, LAYER_PARTS)
    shutil.rmtree(stage)
    return layers


# ------------------------------------------------------------------ engine
def docker(*args, capture=False, check=True, input_=None) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], check=check, text=True, input=input_, capture_output=capture)


def image_label(ref: str, label: str) -> str | None:
    r = docker("image", "inspect", "--format", "{{json .Config.Labels}}", ref, capture=True, check=False)
    if r.returncode != 0:
        return None
    labels = json.loads(r.stdout or "null") or {}
    return labels.get(label)


QUICK_CHECK = False  # --quick-check: machine and vLLM metadata only, no vLLM import


def gate(ref: str, arch: str) -> tuple[bool, str, float]:
    """Run the KV-cache imports inside the image; returns (ok, output, seconds).

    With --quick-check only the machine and the installed vLLM version are read:
    under qemu the full import costs many minutes, and the overlay build's own
    gate step imports the same modules anyway.
    """
    if QUICK_CHECK:
        code = "import platform, importlib.metadata as m; print(platform.machine(), m.version('vllm'))"
    else:
        code = (
            "import platform, importlib.metadata as m; "
            + "; ".join(f"import {mod}" for mod in GATE_MODULES)
            + "; import vllm; print(platform.machine(), m.version('vllm'), vllm.__file__)"
        )
    t0 = time.time()
    r = docker(
        "run",
        "--rm",
        "--platform",
        f"linux/{arch}",
        "--entrypoint",
        "python3",
        ref,
        "-c",
        code,
        capture=True,
        check=False,
    )
    out = r.stdout.strip() if r.returncode == 0 else (r.stdout + r.stderr).strip()
    return r.returncode == 0, out, time.time() - t0


def input_hash(arch: str, reqs: list[str]) -> str:
    h = hashlib.sha256()
    # Bump LAYOUT_VERSION when the image layout (prune list, stub, config) changes.
    h.update(
        json.dumps(
            [
                LAYOUT_VERSION,
                arch,
                reqs,
                ARCHES[arch],
                rootfs.input_key(arch),
                VLLM_STUB,
                EXCLUDE.pattern,
                VLLM_VERSION,
            ]
        ).encode()
    )
    return h.hexdigest()


# ------------------------------------------------------------------ registry
def credentials() -> dict:
    path = STATE_DIR / "credentials.json"
    if not path.exists():
        sys.exit(f"[build_base] no registry credentials at {path}: run tests/infra/services.sh up")
    return json.loads(path.read_text())


def push(ref: str, arch: str, name: str, extra: dict) -> dict:
    """`docker push` an image the engine has, and record it.

    Not pushed when the registry already holds it under ref (services.sh keeps the bases' repositories
    from one registry to the next): its tag names a manifest the engine recorded for this very image
    (RepoDigests, from an earlier push or pull) and has every blob. A push would compress every layer
    again only to find each one there.
    """
    creds = credentials()
    held = registry_holds(ref, creds)
    if held:
        inspect = docker("image", "inspect", "--format", "{{json .RepoDigests}}", ref, capture=True, check=False)
        recorded = (json.loads(inspect.stdout) or []) if inspect.returncode == 0 else []
        if f"{ref.rpartition(':')[0]}@{held}" in recorded:
            log(f"{ref}: the registry holds this image already ({held}), not pushed")
            return record(ref, arch, name, held, extra)
    with tempfile.TemporaryDirectory(prefix="docker-config-") as cfg:
        r = docker(
            "--config",
            cfg,
            "login",
            creds["url"],
            "-u",
            creds["username"],
            "--password-stdin",
            input_=creds["password"],
            capture=True,
            check=False,
        )
        if r.returncode != 0:
            sys.exit(f"[build_base] docker login {creds['url']} failed: {r.stderr.strip()}")
        digest = None
        for attempt in range(3):
            r = docker("--config", cfg, "push", ref, capture=True, check=False)
            m = re.search(r"digest: (sha256:[0-9a-f]{64})", r.stdout)
            if r.returncode == 0 and m:
                digest = m.group(1)
                break
            log(f"push attempt {attempt + 1} failed: {(r.stderr or r.stdout).strip()[-400:]}")
            time.sleep(2 * (attempt + 1))
        if not digest:
            sys.exit(f"[build_base] push of {ref} failed")
    return record(ref, arch, name, digest, extra)


def record(ref: str, arch: str, name: str, digest: str, extra: dict) -> dict:
    """Write $INFRA_STATE_DIR/base-NAME.json for the image ref, pushed with digest; print and return it."""
    repo, _, tag = ref.rpartition(":")
    info = {
        "reference": ref,
        "digest": digest,
        "arch": arch,
        "repository": repo,
        "tag": tag,
        "image": repo,
        "pinned": f"{repo}@{digest}",
        **extra,
    }
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    out = STATE_DIR / f"base-{name}.json"
    out.write_text(json.dumps(info, indent=2) + "\n")
    log(f"recorded {ref} {digest} -> {out}")
    print(json.dumps(info))
    return info


# ------------------------------------------------------------------ builds
def build_arch(arch: str, force: bool = False) -> dict:
    t0 = time.time()
    ref = f"{REPOSITORY}:{ARCHES[arch]['tag']}"
    digest = ""  # publish_image's, when this run builds the image
    for attempt in range(6):
        reqs = read_requirements()
        ihash = input_hash(arch, reqs)
        if not force and image_label(ref, LABEL_HASH) == ihash:
            log(f"{ref}: up to date (input hash {ihash[:12]}), not rebuilt")
            built = False
            break
        base_layer = rootfs.rootfs_tar(arch)
        python = python_layers_cached(arch, reqs, ihash)
        labels = {
            LABEL_HASH: ihash,
            LABEL_KIND: arch,
            "org.glm53.test.vllm-version": VLLM_VERSION,
            "org.glm53.test.torch-version": ARCHES[arch]["torch"],
            "org.opencontainers.image.title": "synthetic vllm/vllm-openai stand-in (tests only)",
        }
        digest = publish_image(
            ref,
            ImageConfig(arch=arch, entrypoint=("vllm", "serve"), labels=labels),
            [
                Layer(base_layer, f"tests/infra/rootfs.py: {rootfs.SUITE} minbase"),
                *(
                    Layer(part, f"vllm {VLLM_VERSION} python tree + cpu torch, part {i}")
                    for i, part in enumerate(python)
                ),
            ],
            credentials(),
        )
        ok, out, secs = gate(ref, arch)
        log(f"gate ({arch}, {secs:.1f} s): {out.splitlines()[-1] if out else ''}")
        if ok:
            built = True
            break
        m = re.search(r"No module named '([^'.]+)", out)
        if not m:
            sys.exit(f"[build_base] import gate failed in {ref}:\n{out[-3000:]}")
        dist = MODULE_DIST.get(m.group(1), m.group(1))
        log(f"import gate misses module {m.group(1)!r}: adding {dist} and rebuilding")
        with open(CACHE_DIR / "discovered-requirements.txt", "a") as f:
            f.write(dist + "\n")
    else:
        sys.exit(f"[build_base] {ref}: imports still failing after discovery")
    arch_seen = docker("image", "inspect", "--format", "{{.Architecture}}", ref, capture=True).stdout.strip()
    if arch_seen != arch:
        sys.exit(f"[build_base] {ref} records architecture {arch_seen}, expected {arch}")
    size = int(docker("image", "inspect", "--format", "{{.Size}}", ref, capture=True).stdout.strip())
    extra = {"input_hash": ihash, "size_bytes": size, "built": built, "seconds": round(time.time() - t0, 1)}
    info = record(ref, arch, arch, digest, extra) if built else push(ref, arch, arch, extra)
    log(f"{arch} base done in {time.time() - t0:.0f} s ({size >> 20} MiB)")
    return info


WRONG_DOCKERFILE = """\
FROM {base}
# Same vLLM tree; only the installed distribution's METADATA version changes.
RUN set -eu; \\
    d=$(python3 -c 'import importlib.metadata as m; print(m.distribution("vllm")._path)'); \\
    sed -i 's/^Version: {good_re}$/Version: {bad}/' "$d/METADATA"; \\
    python3 -c 'import importlib.metadata as m; assert m.version("vllm") == "{bad}", m.version("vllm")'
LABEL {label}="{ihash}" org.glm53.test.vllm-version="{bad}" {kind}="wrong-vllm-version"
"""


def build_wrong(force: bool = False) -> dict:
    t0 = time.time()
    base_ref = f"{REPOSITORY}:{ARCHES['amd64']['tag']}"
    if image_label(base_ref, LABEL_HASH) is None:
        build_arch("amd64")
    base_hash = image_label(base_ref, LABEL_HASH)
    ref = f"{REPOSITORY}:{WRONG_TAG}"
    ihash = hashlib.sha256((base_hash + WRONG_DOCKERFILE + WRONG_VLLM_VERSION).encode()).hexdigest()
    built = False
    if force or image_label(ref, LABEL_HASH) != ihash:
        text = WRONG_DOCKERFILE.format(
            base=base_ref,
            good=VLLM_VERSION,
            bad=WRONG_VLLM_VERSION,
            good_re=VLLM_VERSION.replace(".", r"\."),
            label=LABEL_HASH,
            kind=LABEL_KIND,
            ihash=ihash,
        )
        with tempfile.TemporaryDirectory() as ctx:
            Path(ctx, "Dockerfile").write_text(text)
            env = {**os.environ, "DOCKER_BUILDKIT": "0"}
            log(f"building {ref} (classic builder)")
            r = subprocess.run(["docker", "build", "-q", "-t", ref, ctx], env=env, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"[build_base] docker build of {ref} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        built = True
    else:
        log(f"{ref}: up to date, not rebuilt")
    r = docker(
        "run",
        "--rm",
        "--entrypoint",
        "python3",
        ref,
        "-c",
        "import importlib.metadata as m; print(m.version('vllm'))",
        capture=True,
    )
    if r.stdout.strip() != WRONG_VLLM_VERSION:
        sys.exit(f"[build_base] {ref} reports vLLM {r.stdout.strip()!r}")
    size = int(docker("image", "inspect", "--format", "{{.Size}}", ref, capture=True).stdout.strip())
    return push(
        ref,
        "amd64",
        "wrong-version",
        {
            "input_hash": ihash,
            "size_bytes": size,
            "built": built,
            "vllm_version": WRONG_VLLM_VERSION,
            "seconds": round(time.time() - t0, 1),
        },
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--arch", choices=sorted(ARCHES))
    g.add_argument("--wrong-version", action="store_true")
    g.add_argument("--all", action="store_true")
    g.add_argument("--push-existing", metavar="REF", help="push the engine's image REF and record it (with --name)")
    g.add_argument("--registry-address", action="store_true", help="print the test registry's address")
    ap.add_argument("--name", help="--push-existing: the record's name (base-NAME.json)")
    ap.add_argument("--force", action="store_true", help="rebuild even if the input hash matches")
    ap.add_argument(
        "--quick-check",
        action="store_true",
        help="check the image's machine and vLLM version only, not the vLLM import",
    )
    a = ap.parse_args()
    global QUICK_CHECK
    QUICK_CHECK = a.quick_check
    if a.registry_address:
        print(REGISTRY)
    elif a.push_existing:
        if not a.name:
            ap.error("--push-existing needs --name")
        arch = docker("image", "inspect", "--format", "{{.Architecture}}", a.push_existing, capture=True).stdout.strip()
        push(a.push_existing, arch, a.name, {})
    elif a.all:
        build_arch("amd64", a.force)
        build_wrong(a.force)
        build_arch("arm64", a.force)
    elif a.wrong_version:
        build_wrong(a.force)
    else:
        build_arch(a.arch, a.force)


if __name__ == "__main__":
    main()
