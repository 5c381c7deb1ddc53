"""The serving commands: compose and deploy (the files that serve the image), preflight (the image's
start-time check, run on the host) and pin (the checkpoints' revisions into the recipe)."""

from __future__ import annotations

from pathlib import Path

import click

from stackbuild.cli.options import json_option, owner_option, recipe_option, repository_option
from stackbuild.cli.output import emit, print_json
from stackbuild.cli.signing_options import signature_trust_options
from stackbuild.core.recipe import load_recipe
from stackbuild.serve.signature_policy import PolicyEngine


@click.command()
@recipe_option
@owner_option
@repository_option("Serve the image from")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Compose file to write, in an existing directory; a file git tracks is replaced only when it is "
    "compose's own output for this recipe. Default: compose/<recipe name>.compose.yaml for a recipe git tracks "
    "in this checkout, else next to the recipe; with --models-dir, --port or --gpus, the git-ignored "
    "<recipe name>.local.compose.yaml instead, never the committed file. For a multi-node recipe, the existing "
    "directory to write one file per node role into (default: compose/).",
)
@click.option(
    "--models-dir",
    help="Host directory holding the model snapshots, mounted read-only at the recipe's mount point (default: "
    "the mount point itself, e.g. /models, which must exist on the host: the file never creates it).",
)
@click.option(
    "--port", type=int, help="Host port to publish on serving.host_ip (single-node recipes; default: serving.port)."
)
@click.option("--gpus", help="Comma-separated GPU ids to reserve (default: any, count = TP size / nodes).")
@click.option("--digest", help="Image digest to pin in the compose file (default: from the last build report).")
@click.option(
    "--baseline",
    is_flag=True,
    help="Write the baseline's file instead: the same image, model and flags without --speculative-config, "
    "service vllm-baseline of project <recipe name>-baseline, published on serving.port + 1 (--port to choose), "
    "for `qualify --baseline-url`; <recipe name>.baseline.compose.yaml (.baseline.local.compose.yaml). "
    "One-node recipes.",
)
@click.option(
    "--engine-api",
    metavar="auto|VERSION",
    help="The Docker Engine API version the file is written for: `auto` asks the engine at DOCKER_HOST (or the "
    "default socket); a version (e.g. 1.44) is checked against that engine when one answers (older: exit 32). "
    "From API 1.44 (Docker 25) the health check probes every 5 s while the server starts (start_interval). "
    "Default: the oldest supported engine's, 1.41 (no start_interval, every supported engine takes the file). "
    "Given, it is a machine value (the .local.compose.yaml).",
)
@signature_trust_options
@json_option
def compose(
    recipe_path,
    owner,
    repository,
    output,
    models_dir,
    port,
    gpus,
    digest,
    baseline,
    engine_api,
    signature_key,
    signature_identity,
    signature_issuer,
    as_json,
):
    """Write the compose file that serves the image with `docker compose up` (one per node role
    when the recipe spans several machines), or with --baseline the same model without speculation.

    With --signature-key (or --signature-identity and --signature-issuer) the file carries what the
    image's signature must verify with, and `build.py up -f FILE` checks it before `docker compose up`."""
    from stackbuild.cli.engine_target import engine_api_for
    from stackbuild.serve.compose_files import check_compose_options, write_compose_files, written_paths
    from stackbuild.serve.signature_trust import signature_trust
    from stackbuild.serve.target import serve_target

    recipe = load_recipe(recipe_path)
    trust = signature_trust(signature_key, signature_identity, signature_issuer)
    if baseline and recipe.serving.nodes > 1:
        raise click.UsageError(
            f"--baseline: recipe {recipe.name} serves on {recipe.serving.nodes} nodes; the baseline is one "
            "machine's file (a one-node recipe)"
        )
    check_compose_options(recipe, output, port)
    api = engine_api_for(engine_api)
    target = serve_target(
        recipe,
        owner=owner,
        repository=repository,
        digest=digest,
        models_dir=models_dir,
        port=port,
        gpus=gpus,
        engine_api=api,
        signature=trust,
    )
    result = write_compose_files(target, output=output, baseline=baseline)
    emit(as_json, result, "wrote " + ", ".join(written_paths(result)))


@click.command()
@click.option(
    "--target", "target", type=click.Choice(["k8s"]), required=True, help="What to deploy on (k8s: Kubernetes)."
)
@recipe_option
@owner_option
@repository_option("Deploy the image from")
@click.option(
    "-o",
    "--output",
    "output_dir",
    type=click.Path(path_type=Path),
    help="Existing directory to write <recipe name>.k8s.yaml into (default: compose/ for a recipe git tracks "
    "in this checkout, else the recipe's directory).",
)
@click.option(
    "--models-host-path",
    help="Node directory holding the model snapshots, mounted read-only (default: the recipe's models directory).",
)
@click.option("--models-pvc", help="PersistentVolumeClaim holding the model snapshots instead of a host path.")
@click.option(
    "--ifname", default="eth0", show_default=True, help="NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME in multi-node pods."
)
@click.option("--namespace", help="metadata.namespace of every object (default: none, kubectl's current).")
@click.option(
    "--api-key-secret",
    help="Secret whose key 'api-key' becomes the API server's VLLM_API_KEY "
    "(optional: no Secret, no key; default: <recipe name>-api-key).",
)
@click.option(
    "--image-pull-secret",
    "image_pull_secrets",
    multiple=True,
    help="imagePullSecrets entry (repeatable) for a private registry, e.g. a GHCR package (default: none).",
)
@click.option("--digest", help="Image digest to pin (default: from the last build report).")
@signature_trust_options
@click.option(
    "--signature-policy",
    "signature_policy",
    type=click.Choice([e.value for e in PolicyEngine]),
    help="The admission controller the signature policy is written for: kyverno (a ClusterPolicy verifyImages "
    "rule; key or keyless; the default) or policy-controller (sigstore's ClusterImagePolicy; keyless only: it "
    "verifies the bundles a push writes only for keyless authorities). The policy comes first in the file.",
)
@json_option
def deploy(
    target,
    recipe_path,
    owner,
    repository,
    output_dir,
    models_host_path,
    models_pvc,
    ifname,
    namespace,
    api_key_secret,
    image_pull_secrets,
    digest,
    signature_key,
    signature_identity,
    signature_issuer,
    signature_policy,
    as_json,
):
    """Write Kubernetes manifests: a Deployment (one machine) or a LeaderWorkerSet (serving.nodes > 1),
    and a Service; with --signature-key (or --signature-identity and --signature-issuer) first an admission
    policy that admits the image only signed by that key or identity."""
    from stackbuild.serve.k8s import write_manifests
    from stackbuild.serve.k8s_options import deploy_options
    from stackbuild.serve.signature_policy import signature_policy as policy_of
    from stackbuild.serve.signature_trust import signature_trust
    from stackbuild.serve.target import serve_target

    recipe = load_recipe(recipe_path)
    policy = policy_of(signature_trust(signature_key, signature_identity, signature_issuer), signature_policy)
    options = deploy_options(
        output_dir=output_dir,
        models_host_path=models_host_path,
        models_pvc=models_pvc,
        ifname=ifname,
        namespace=namespace,
        api_key_secret=api_key_secret,
        image_pull_secrets=image_pull_secrets,
        signature=policy,
    )
    result = write_manifests(serve_target(recipe, owner=owner, repository=repository, digest=digest), options)
    emit(as_json, result, f"wrote {result['path']} ({', '.join(result['kinds'])})")


@click.command(context_settings={"ignore_unknown_options": True})
@recipe_option
@click.option(
    "--models-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Host directory holding the checkpoints, laid out as `compose --models-dir` mounts it.",
)
@click.option(
    "--role",
    type=click.Choice(["leader", "worker"]),
    default=None,
    help="Multi-node recipe: check this role's command only (default: the leader's and a worker's).",
)
@click.option(
    "--leader-address",
    default="127.0.0.1",
    show_default=True,
    help="Multi-node recipe: the leader's address as the role commands receive it.",
)
@click.option(
    "--node-rank",
    type=int,
    default=1,
    show_default=True,
    help="Multi-node recipe: the worker's node rank (1 to serving.nodes - 1).",
)
@json_option
@click.argument("extra_args", nargs=-1, type=click.UNPROCESSED)
def preflight(recipe_path, models_dir, role, leader_address, node_rank, as_json, extra_args):
    """Run the image's start-time pre-flight on the host: the compose command (plus any
    serve args after `--`) against the configs under --models-dir.

    The same code the container's entrypoint runs: the fast path when nothing differs
    from what the build checked, otherwise vLLM's serve parser, the simulator, the gate
    and the cross-check against this interpreter's vLLM. A multi-node recipe's leader and
    worker commands are checked as the generated compose files start them.
    """
    from stackbuild.serve.preflight_host import check_on_host

    recipe = load_recipe(recipe_path)
    given = click.get_current_context().get_parameter_source
    explicit = [
        f"--{name.replace('_', '-')}"
        for name in ("role", "leader_address", "node_rank")
        if given(name) is click.core.ParameterSource.COMMANDLINE
    ]
    result = check_on_host(
        recipe,
        models_dir,
        role=role,
        leader_address=leader_address,
        node_rank=node_rank,
        explicit_role_options=tuple(explicit),
        extra_args=tuple(extra_args),
    )
    if as_json:
        print_json(result.to_json())
    else:
        for line in result.report_lines():
            click.echo(line)
    result.raise_if_failed()


@click.command()
@recipe_option
@click.option(
    "--models-dir",
    required=True,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Host directory holding the checkpoints, laid out as `compose --models-dir` mounts it.",
)
@json_option
def pin(recipe_path, models_dir, as_json):
    """Write the snapshot commits and config sha256s of the checkpoints under --models-dir into the recipe
    (target/drafter revision and config_sha256), editing only those lines."""
    from stackbuild.serve.pin import pin as pin_recipe

    result = pin_recipe(recipe_path, models_dir)
    text = "; ".join(f"{p['role']}.revision {p['revision']}" for p in result["pins"])
    emit(as_json, result, f"{'pinned' if result['changed'] else 'already pinned'} in {result['recipe']}: {text}")
