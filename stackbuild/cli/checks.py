"""The checks of what was built and what serves it: verify (a pushed image against its recipe) and
qualify (a running deployment measured, its record attached to the image it runs)."""

from __future__ import annotations

from pathlib import Path

import click

from stackbuild.cli.options import json_option, recipe_option
from stackbuild.cli.output import emit, print_json
from stackbuild.cli.signing_options import signature_check_of, verify_options
from stackbuild.core.recipe import load_recipe


@click.command()
@click.argument("image")
@recipe_option
@json_option
@verify_options
@click.option(
    "--import-vllm",
    is_flag=True,
    help="Re-plan with the image's vLLM even when the oracle record its build left matches the image.",
)
def verify(image, recipe_path, as_json, key, certificate_identity, certificate_oidc_issuer, cosign_path, import_vllm):
    """Pull IMAGE@DIGEST, compare its labels with the recipe, re-run the gate inside it,
    check its SBOM and provenance.

    The gate is held to the oracle record the build left in the image (vLLM's answer, keyed by the
    image's vLLM tree, packages and gate input); a record that does not match, or --import-vllm,
    makes it import the image's vLLM and plan again.

    With --key (or keyless --certificate-identity and --certificate-oidc-issuer), first check
    the signatures of the image and of its SBOM and provenance attestations with cosign, and
    with IMAGE given as REPOSITORY:TAG@DIGEST that the tag still names the digest; nothing else
    is read before those pass.
    """
    from stackbuild.image.verify import image_by_digest, qualification_lines, verify_image

    image_by_digest(image)
    signatures = signature_check_of(key, certificate_identity, certificate_oidc_issuer, cosign_path)
    result = verify_image(
        image, load_recipe(recipe_path), json_progress=as_json, signatures=signatures, import_vllm=import_vllm
    )
    emit(as_json, result, "\n".join([f"{image}: {result['verdict']}", *qualification_lines(result)]))


@click.command()
@click.option("--url", required=True, help="The running vLLM OpenAI server (e.g. http://127.0.0.1:8000).")
@recipe_option
@click.option(
    "--model",
    help="Model name to request (default: the recipe's serving.served_model_name, or the one the server lists).",
)
@click.option(
    "--stock",
    is_flag=True,
    help="The server runs stock vLLM (no overlay): hold its KV cache to the gate's stock figures "
    "(default: the overlay, which every image `build.py build` makes applies).",
)
@click.option(
    "--server-log",
    metavar="FILE",
    help="The server's log (`-`: standard input, e.g. `docker compose logs vllm | ... --server-log -`): its "
    "`kv cache group sizes` and `KV cache size: N tokens` are held to the gate's too.",
)
@click.option(
    "--api-key-env",
    metavar="VAR",
    help="Environment variable holding the server's API key (never on the command line; default: VLLM_API_KEY "
    "when it is set, as the compose env file names it; else no key).",
)
@click.option("--baseline-url", help="The same model served without speculation, for the speed-up.")
@click.option(
    "--baseline-result",
    metavar="FILE",
    type=click.Path(path_type=Path),
    default=None,
    help="Instead of --baseline-url: the qualify.json of an earlier run (of the same model without speculation, "
    "where both servers do not fit at once), its served figures the speed-up's baseline.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for qualify.json and the figure qualify.png (made when missing).",
)
@click.option(
    "--max-tokens", type=click.IntRange(1, 1 << 16), default=256, show_default=True, help="Output tokens per request."
)
@click.option("--runs", type=click.IntRange(1, 1000), default=3, show_default=True, help="Measured runs per prompt.")
@click.option("--warmup", type=click.IntRange(0, 100), default=1, show_default=True, help="Warm-up runs per prompt.")
@click.option(
    "--ready-timeout",
    type=click.FloatRange(0, 86400),
    default=300,
    show_default=True,
    help="Seconds to wait for the first streamed token of a generation.",
)
@click.option(
    "--prefix-blocks",
    type=click.IntRange(1, 1024),
    default=2,
    show_default=True,
    help="k: the prefix-cache probe's shared prefix is k x the hit alignment.",
)
@click.option(
    "--allow-degenerate",
    is_flag=True,
    help="Untrained (dummy or random) weights: report output that repeats one short cycle of tokens, and drafts "
    "that are almost never accepted, as warnings, not failures (the recipe's min_acceptance still applies).",
)
@click.option(
    "--attach",
    "attach_to",
    metavar="IMAGE@DIGEST",
    help="Push the result, pass or fail (its verdict inside), as an in-toto statement referring to this "
    "image (REPOSITORY@sha256:...), as the SBOM and provenance are; credentials from `docker login`.",
)
@click.option(
    "--capacity",
    metavar="PROMPT:OUTPUT",
    default=None,
    help="Instead of the measurements: send the gate's requests at once N of PROMPT prompt and OUTPUT output "
    "tokens together, then N + 1, and hold what the server runs together without a preemption (/metrics) to "
    "the gate's run of the same requests for the server's max_model_len and pool; writes capacity.json and "
    "capacity.png under --out (exit 33 when they differ). A probe whose peak the gate holds for fewer steps "
    "than the server ran between two polls is sent again; one no send resolves is said NOT RESOLVED, not a "
    "difference.",
)
@click.option(
    "--capacity-requests",
    type=click.IntRange(1, 64),
    default=None,
    help="Requests --capacity sends at once, in one probe (default: the gate's requests at once, then one more).",
)
@click.option(
    "--capacity-timeout",
    type=click.FloatRange(1, 86400),
    default=900,
    show_default=True,
    help="Seconds --capacity waits for each probe's requests.",
)
@json_option
def qualify(
    url,
    recipe_path,
    model,
    stock,
    server_log,
    api_key_env,
    baseline_url,
    baseline_result,
    out_dir,
    max_tokens,
    runs,
    warmup,
    ready_timeout,
    prefix_blocks,
    allow_degenerate,
    attach_to,
    capacity,
    capacity_requests,
    capacity_timeout,
    as_json,
):
    """Measure a running deployment as the published numbers were measured: its KV cache against the
    gate's, readiness, end-to-end output tok/s (stream false) and TTFT/TPOT/ITL (streamed), speculative
    decoding and prefix caching from /metrics, output sanity.

    Exit 0 when everything holds, 30 when the server's KV cache is not the gate's for the recipe, 24
    when the deployment misbehaves, 25 when a figure is below the recipe's qualify.min_* expectations
    (20-23: the server cannot be measured). Every request fits the server's max_model_len (/v1/models): runs and
    the prefix-cache probe are sized down, or a prompt skipped, with a notice on stderr and in the result.
    --baseline-result FILE (a qualify.json of an earlier run) is read before anything is measured (2: unreadable,
    not a qualify result, or of another model). With --attach,
    the image's manifest is looked up before anything is measured (2: not a digest reference;
    7-9: the registry), and the record is attached whatever the verdict."""
    from geometry import Behaviour
    from stackbuild.serve.qualify.cli_support import run_qualify
    from stackbuild.serve.qualify.run import raise_if_failed

    if capacity is not None:
        _capacity(url, recipe_path, model, stock, api_key_env, out_dir, capacity, capacity_requests, capacity_timeout)
        return
    target = None
    if attach_to is not None:
        from stackbuild.image.qualification import target_of

        target = target_of(attach_to)
    run = run_qualify(
        url=url,
        recipe_path=recipe_path,
        model=model,
        behaviour=Behaviour.of_stock_flag(stock),
        server_log=server_log,
        api_key_env=api_key_env,
        baseline_url=baseline_url,
        baseline_result=baseline_result,
        out_dir=out_dir,
        max_tokens=max_tokens,
        runs=runs,
        warmup=warmup,
        ready_timeout=ready_timeout,
        prefix_blocks=prefix_blocks,
        allow_degenerate=allow_degenerate,
        subject=target.reference if target is not None else None,
        notify=lambda line: click.echo(f"notice: {line}", err=True),
    )
    click.echo(run.text, err=True)
    for path in run.written:
        click.echo(f"wrote {path}", err=True)
    data = run.result.to_json()
    if target is not None:
        from stackbuild.image.qualification import attach_qualification

        attached = attach_qualification(target, run.record)
        click.echo(attached.line(), err=True)
        data["attached"] = attached.to_json()
    if as_json:
        print_json(data)
    raise_if_failed(run.result)


def _capacity(url, recipe_path, model, stock, api_key_env, out_dir, capacity, sent, timeout_s) -> None:
    """`qualify --capacity`: the probe, its table on stderr, capacity.json and capacity.png under --out."""
    import json

    from geometry import Behaviour
    from stackbuild.serve.qualify import capacity as C
    from stackbuild.serve.qualify.cli_support import api_key, check_out_dir
    from stackbuild.serve.qualify.client import Server

    prompt, _, output = capacity.partition(":")
    if not (prompt.isdigit() and output.isdigit() and int(prompt) >= 1 and int(output) >= 1):
        raise click.BadParameter(
            f"{capacity!r} is not PROMPT:OUTPUT in tokens (e.g. 6000:200)", param_hint="--capacity"
        )
    check_out_dir(out_dir)
    server = Server(url, api_key(api_key_env))
    behaviour = Behaviour.of_stock_flag(stock)
    result = C.run_capacity(
        server, load_recipe(recipe_path), model, behaviour, int(prompt), int(output), sent, timeout_s
    )
    click.echo(result.text(), err=True)
    if out_dir is not None:
        from stackbuild.core.atomic import replace_text

        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / C.JSON_NAME
        replace_text(path, json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n")
        click.echo(f"wrote {path}", err=True)
        click.echo(f"wrote {C.figure(result, out_dir / C.FIGURE_NAME)}", err=True)
    C.raise_if_differs(result)
