"""What the serving e2e tests (tests/e2e/serve/test_serving_e2e.py) read beside `build.py qualify`, with plain
requests: the server's own answers (its max_model_len, a chat prompt's tokens, a chat request's answer), and
the registry side of `qualify --attach` (a small image pushed, the qualification statements attached to it)."""

from __future__ import annotations

import json

SERVED_MODEL = "tiny"  # tests/recipes/cpu-tiny's serving.served_model_name


def models_max_len(url: str, key: str) -> int:
    """The max_model_len the server's /v1/models gives for the served model."""
    import requests

    cards = requests.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=30).json()["data"]
    (card,) = [c for c in cards if c["id"] == SERVED_MODEL]
    return card["max_model_len"]


def chat_answer(url: str, key: str, prompt: str, **sampling):
    """The server's answer to one chat request of ``prompt`` at temperature 0, thinking off, ignore_eos."""
    import requests

    body = {
        "model": SERVED_MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "ignore_eos": True,
        "chat_template_kwargs": {"enable_thinking": False},
        **sampling,
    }
    return requests.post(
        f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=300
    )


def prompt_tokens(url: str, key: str, prompt: str) -> int:
    """The server's own count of a chat prompt's tokens (usage.prompt_tokens of a one-token generation)."""
    answer = chat_answer(url, key, prompt, max_tokens=1)
    assert answer.status_code == 200, answer.text
    return answer.json()["usage"]["prompt_tokens"]


QUALIFICATION = "application/vnd.glm53.qualification.v1+json"


def push_small_image(registry, repository: str) -> str:
    """An OCI image manifest (an empty config, no layers) pushed with plain registry API calls; its digest."""
    from signing_support import put_blob, put_manifest

    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": put_blob(registry, repository, config),
            "size": len(config),
        },
        "layers": [],
    }
    digest, _size = put_manifest(registry, repository, manifest, tag="v1")
    return digest


def attached_statements(registry, repository: str, digest: str) -> list[dict]:
    """The qualification statements the fallback tag sha256-<hex> lists, read with plain registry API calls."""
    import requests

    name = repository.split("/", 1)[1]
    base, auth = f"http://{registry.address}/v2/{name}", (registry.username, registry.password)
    accept = {"Accept": "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json"}
    index = requests.get(
        f"{base}/manifests/sha256-{digest.removeprefix('sha256:')}", headers=accept, auth=auth, timeout=30
    )
    assert index.status_code == 200, index.text
    out = []
    for entry in index.json()["manifests"]:
        assert entry["artifactType"] == QUALIFICATION
        manifest = requests.get(f"{base}/manifests/{entry['digest']}", headers=accept, auth=auth, timeout=30).json()
        assert manifest["subject"]["digest"] == digest
        (layer,) = manifest["layers"]
        assert layer["mediaType"] == "application/vnd.in-toto+json"
        out.append(json.loads(requests.get(f"{base}/blobs/{layer['digest']}", auth=auth, timeout=30).content))
    return out
