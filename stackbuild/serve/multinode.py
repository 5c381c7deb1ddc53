"""One compose file per node role for a recipe served across machines (serving.nodes > 1).

vLLM's own multi-node launch: every machine runs the image with the recipe's serve
argv plus ``--nnodes N --node-rank R --master-addr LEADER --master-port P``; the
leader (rank 0) serves the API, workers add ``--headless``. The files use host
networking (NCCL and gloo talk between the machines directly) and leave to the user,
as variables Compose requires, what only the site knows: the leader's address, the
network interface NCCL and gloo use, and (more than two nodes) each worker's rank.
Each file is built from the single-node file's parts (a compose_service.Service and a
compose_header.Header per role) for the command's :class:`ServeTarget`. ``role_document`` and
``render_role`` are pure; ``write_role_files`` checks every role's argv with vLLM's serve parser (its
multi-node checks included) and each file with Docker Compose, then writes all of
them or none.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Optional

from geometry import IMAGE_DIGEST_ENV
from stackbuild.core.engines import OLDEST
from stackbuild.core.errors import ComposeOverrideError, OutputError
from stackbuild.core.labels import NODE_ROLE
from stackbuild.core.output import COMPOSE_SUFFIX, LOCAL_COMPOSE_SUFFIX
from stackbuild.core.recipe import Recipe
from stackbuild.core.serve_args import (
    FINGERPRINT_PORT,
    LEADER,
    MASTER_PORT,
    WORKER,
    RoleCommand,
    SlotValues,
    ranks_per_node,
    role_commands,
)
from stackbuild.serve.compose import COMPOSE_DIR
from stackbuild.serve.compose import output_dir as default_output_dir
from stackbuild.serve.compose_header import Header, compose_text, header, signed
from stackbuild.serve.compose_service import LOOPBACK, Service, escape, project_name, service_document
from stackbuild.serve.generated import COMPOSE
from stackbuild.serve.image_pin import ImagePin
from stackbuild.serve.target import ServeTarget, serve_target
from stackbuild.serve.writer import Document, notice, write_documents

# Variables the user sets (shell or ./.env next to the files) on every machine.
LEADER_ADDRESS_VARIABLE = "GLM53_LEADER_ADDRESS"
NODE_RANK_VARIABLE = "GLM53_NODE_RANK"
# NCCL's and gloo's own variables: the interface that reaches the other machines (e.g. the ConnectX port).
INTERFACE_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
# What the checks put in the variables (an address from TEST-NET-1, RFC 5737; an interface name).
CHECK_VALUES = {LEADER_ADDRESS_VARIABLE: "192.0.2.1", "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}


def _required(name: str, why: str) -> str:
    """Compose's ``${NAME:?message}``: the file refuses to start while NAME is unset or empty."""
    return "${" + name + ":?set " + name + " to " + why + "}"


LEADER_ADDRESS = _required(LEADER_ADDRESS_VARIABLE, "the leader machine's address on the network between the nodes")
INTERFACE = {
    name: _required(name, "the network interface that reaches the other nodes (ip -br addr)")
    for name in INTERFACE_VARIABLES
}


def worker_rank(recipe: Recipe) -> str:
    """A worker's --node-rank: 1 with two nodes, else the variable each worker machine sets."""
    nodes = recipe.serving.nodes
    return "1" if nodes == 2 else _required(NODE_RANK_VARIABLE, f"this worker's node rank, 1 to {nodes - 1}")


def slot_values(recipe: Recipe) -> SlotValues:
    """The values the files write into the role slots: serving.host_ip, and the Compose variables the user
    sets for the leader's address and (more than two nodes) a worker's rank."""
    return SlotValues(host=recipe.serving.host_ip, master_addr=LEADER_ADDRESS, node_rank=worker_rank(recipe))


def resolved_slot_values(recipe: Recipe, variables: dict[str, str]) -> SlotValues:
    """The slot values once Compose has read ``variables`` (what a container of the role receives)."""
    return SlotValues(
        host=recipe.serving.host_ip,
        master_addr=variables[LEADER_ADDRESS_VARIABLE],
        node_rank="1" if recipe.serving.nodes == 2 else variables.get(NODE_RANK_VARIABLE),
    )


@dataclass(frozen=True)
class RoleFile:
    role: str
    path: Path
    text: str
    command: RoleCommand


def default_path(recipe: Recipe, role: str, directory: Optional[Path] = None, *, local: bool = False) -> Path:
    """A node role's file: in ``directory`` (-o), else where :func:`compose.output_dir` says; ``local`` as
    :func:`compose.default_output` has it."""
    where = directory or default_output_dir(recipe)
    suffix = LOCAL_COMPOSE_SUFFIX if local and directory is None and where == COMPOSE_DIR else COMPOSE_SUFFIX
    return where / f"{recipe.name}.{role}{suffix}"


def image_environment(image: ImagePin) -> dict[str, str]:
    """What the pre-flight's rank fingerprint cannot read from the image itself: its digest, when pinned."""
    return {IMAGE_DIGEST_ENV: image.digest} if image.digest else {}


def role_service(recipe: Recipe, command: RoleCommand, image: ImagePin) -> Service:
    """A node role's service: its argv (the slots as Compose variables) on host networking."""
    s = recipe.serving
    serves_api = command.role == LEADER
    return Service(
        name=command.role,
        project=f"{project_name(recipe)}-{command.role}",
        # Slot values carry Compose variables: they are not escaped; every literal is.
        command=tuple(command.filled(slot_values(recipe), literal=escape)),
        published_port=None,  # host networking: the API server binds serving.host_ip itself (--host)
        probe_host=(LOOPBACK if s.host_ip == "0.0.0.0" else s.host_ip) if serves_api else None,  # headless: no API
        environment={**INTERFACE, **image_environment(image)},
        labels={NODE_ROLE: command.role},
    )


def target_role_document(target: ServeTarget, command: RoleCommand) -> dict:
    """One role's compose document as plain data (pure)."""
    return service_document(target, role_service(target.recipe, command, target.image))


def role_header(recipe: Recipe, command: RoleCommand, image: ImagePin, engine_api: str = OLDEST.api) -> Header:
    """The single-node header with where the API is reached, how to start the file, and the role's own lines."""
    s = recipe.serving
    nodes = s.nodes
    lines = [
        "#",
        f"# MULTI-NODE ({nodes} machines, {ranks_per_node(recipe)} rank(s) each): this is the "
        f"{command.role.upper()} file.",
    ]
    if command.role == LEADER:
        lines.append(f"#   Run it on the leader machine (node rank 0, serves the API on {s.host_ip}:{s.port}).")
    else:
        lines.append("#   Run it on every other machine (headless: joins the leader's tensor-parallel group, no API).")
    lines += [
        "#   Set on every machine (shell, or ./.env next to this file):",
        f"#     {LEADER_ADDRESS_VARIABLE}  the leader's address on the network between the nodes",
        "#     NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME  the interface that reaches the other nodes",
    ]
    if command.role == WORKER and nodes > 2:
        lines.append(f"#     {NODE_RANK_VARIABLE}  this worker's node rank (1 to {nodes - 1}, each worker its own)")
    lines.append(
        f"#   The leader listens for the group on {LEADER_ADDRESS_VARIABLE}:{MASTER_PORT} and, until every worker "
        f"has fetched its pre-flight fingerprint, on :{FINGERPRINT_PORT} (TCP; open both between the nodes)."
    )
    return replace(
        header(recipe, image, engine_api=engine_api),
        reach=(
            f"# The leader's API server binds {s.host_ip}:{s.port} on the host "
            "(serving.host_ip; host networking, nothing is published)."
        ),
        start=(
            f"# Start: docker compose -f <this file> up -d   (on the {command.role} machine; "
            "needs the NVIDIA container toolkit)"
        ),
        role=tuple(lines),
    )


def target_role_text(target: ServeTarget, command: RoleCommand) -> str:
    """One role's compose file's text (pure)."""
    doc = target_role_document(target, command)
    head = role_header(target.recipe, command, target.image, target.written_for_api)
    head = signed(head, target.signature)
    return compose_text(target.recipe, target.image, head, doc)


def role_document(recipe: Recipe, command: RoleCommand, **options: Any) -> dict:
    """:func:`target_role_document` of the target :func:`serve_target` builds from ``options``."""
    return target_role_document(serve_target(recipe, **options), command)


def render_role(recipe: Recipe, command: RoleCommand, **options: Any) -> str:
    """:func:`target_role_text` of the target :func:`serve_target` builds from ``options``."""
    return target_role_text(serve_target(recipe, **options), command)


def check_values(recipe: Recipe, command: RoleCommand, rank: Optional[int] = None) -> dict[str, str]:
    """The variables as a user sets them for the checks (a worker's rank when there are several)."""
    values = dict(CHECK_VALUES)
    if command.role == WORKER and recipe.serving.nodes > 2:
        values[NODE_RANK_VARIABLE] = str(rank if rank is not None else 1)
    return values


def resolved_argv(recipe: Recipe, command: RoleCommand, variables: dict[str, str]) -> list[str]:
    """The argv a container of this role receives once Compose has read ``variables``."""
    return command.filled(resolved_slot_values(recipe, variables))


def _serve_cases(recipe: Recipe, commands) -> list[tuple[str, list[str]]]:
    """Every argv the files can start: the leader, and a worker at each rank."""
    cases = []
    for command in commands:
        ranks = range(1, recipe.serving.nodes) if command.role == WORKER else [None]
        for rank in ranks:
            where = command.role if rank is None else f"{command.role} (node rank {rank})"
            cases.append((where, resolved_argv(recipe, command, check_values(recipe, command, rank))))
    return cases


def check_role_options(output_dir: Optional[Path], port: Optional[int]) -> None:
    """What a multi-node recipe refuses before its image is resolved: --port, and an -o that is no directory."""
    if port is not None:
        raise ComposeOverrideError(
            "--port: a multi-node recipe's leader binds serving.port on the host "
            "(host networking); set serving.port in the recipe"
        )
    if output_dir is not None and not Path(output_dir).is_dir():
        raise OutputError(
            f"-o {output_dir}: a multi-node recipe writes one file per role into a directory; "
            "this is not an existing directory"
        )


def write_role_files(target: ServeTarget, *, output_dir: Optional[Path] = None, validate: bool = True) -> dict:
    """Render each role's file, check them (vLLM's serve parser, Docker Compose), then write all or none."""
    from stackbuild.serve.validate import ComposeInvalid, check_compose_file, check_serve_args, run_serve_parser_cases

    check_role_options(output_dir, target.port)
    recipe, image = target.recipe, target.image
    flag = "-o" if output_dir else "compose"
    commands = role_commands(recipe)
    local = bool(target.machine_values)
    files = [
        RoleFile(
            c.role,
            default_path(recipe, c.role, Path(output_dir) if output_dir else None, local=local),
            target_role_text(target, c),
            c,
        )
        for c in commands
    ]

    def check(temps) -> dict[str, dict]:
        """vLLM's serve parser's verdict on every argv, Docker Compose's on every file (none without ``validate``)."""
        checks: dict[str, dict] = {}
        if not validate:
            return checks
        cases = _serve_cases(recipe, commands)
        verdicts = run_serve_parser_cases([argv for _where, argv in cases])
        for (where, argv), verdict in zip(cases, verdicts):
            serve = check_serve_args(argv, where=f"{recipe.path} ({where})", result=verdict)
            checks[f"serve_args {where}"] = serve.as_dict()
            if serve.status == "skipped":
                notice(f"vLLM serve-parser check skipped: {serve.detail}")
                break
            notice(f"checked: {serve.detail} accepts the {where} command")
        for f in files:
            variables = check_values(recipe, f.command)
            config = check_compose_file(temps[f.path], where=str(f.path), variables=variables)
            checks[f"compose_config {f.role}"] = {"status": config.status, "detail": config.detail}
            if config.status == "skipped":
                notice(f"docker compose config check skipped: {config.detail}")
                continue
            resolved = config.parsed["services"][f.role]["command"]
            expected = [escape(a) for a in resolved_argv(recipe, f.command, variables)]
            if resolved != expected:
                raise ComposeInvalid(f"{f.path}: docker compose reads the command as {resolved!r}, not {expected!r}")
            notice(f"checked: docker compose config reads {f.path.name} and its command as written")
        return checks

    # A tracked file is replaced only when it is this recipe's file of the same role.
    documents = [
        Document(f.path, f.text, partial(COMPOSE.wrote, recipe=recipe, labels={NODE_ROLE: f.role})) for f in files
    ]
    checks = write_documents(recipe, documents, flag, check=check, notices=image.notices)
    return {
        "paths": {f.role: str(f.path) for f in files},
        **image.summary(),
        "nodes": recipe.serving.nodes,
        "commands": {f.role: list(f.command.argv) for f in files},
        "slots": {f.role: dict(f.command.slots) for f in files},
        "variables": [LEADER_ADDRESS_VARIABLE, *INTERFACE_VARIABLES]
        + ([NODE_RANK_VARIABLE] if recipe.serving.nodes > 2 else []),
        "checks": checks,
    }
