"""One compose file per node role for a recipe served across machines (serving.nodes > 1).

vLLM's own multi-node launch: every machine runs the image with the recipe's serve
argv plus ``--nnodes N --node-rank R --master-addr LEADER --master-port P``; the
leader (rank 0) serves the API, workers add ``--headless``. The files use host
networking (NCCL and gloo talk between the machines directly) and leave to the user,
as variables Compose requires, what only the site knows: the leader's address, the
network interface NCCL and gloo use, and (more than two nodes) each worker's rank.
``documents`` is pure; ``write_role_files`` checks every role's argv with vLLM's serve
parser (its multi-node checks included) and each file with Docker Compose, then
writes all of them or none.
"""
from __future__ import annotations

import copy
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from stackbuild.core.errors import ComposeOverrideError, OutputError
from stackbuild.core.output import check_output
from stackbuild.core.recipe import Recipe

from stackbuild.core.labels import NODE_ROLE
from stackbuild.serve import compose as generate
from stackbuild.core.serve_args import (LEADER, MASTER_PORT, SLOT_HOST, SLOT_MASTER_ADDR, SLOT_NODE_RANK, WORKER, RoleCommand,
                         role_commands)

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
INTERFACE = {name: _required(name, "the network interface that reaches the other nodes (ip -br addr)")
             for name in INTERFACE_VARIABLES}


def worker_rank(recipe: Recipe) -> str:
    """A worker's --node-rank: 1 with two nodes, else the variable each worker machine sets."""
    nodes = recipe.serving.nodes
    return "1" if nodes == 2 else _required(NODE_RANK_VARIABLE, f"this worker's node rank, 1 to {nodes - 1}")


def slot_values(recipe: Recipe, command: RoleCommand) -> dict[str, str]:
    """The values compose writes into a role's slots (Compose interpolates the variables)."""
    values = {SLOT_HOST: recipe.serving.host_ip, SLOT_MASTER_ADDR: LEADER_ADDRESS}
    if SLOT_NODE_RANK in command.slots:
        values[SLOT_NODE_RANK] = worker_rank(recipe)
    return values


@dataclass(frozen=True)
class RoleFile:
    role: str
    path: Path
    text: str
    command: RoleCommand


def default_path(recipe: Recipe, role: str, directory: Optional[Path] = None) -> Path:
    return (directory or generate.COMPOSE_DIR) / f"{recipe.name}.{role}.compose.yaml"


def _gpu_devices(recipe: Recipe, gpus: Optional[str]) -> dict:
    per_node = recipe.serving.tensor_parallel_size // recipe.serving.nodes
    device: dict = {"driver": "nvidia"}
    if gpus:
        ids = [g.strip() for g in gpus.split(",") if g.strip()]
        if not ids or any(not generate.GPU_ID_RE.match(g) for g in ids) or len(set(ids)) != len(ids):
            raise ComposeOverrideError(f"--gpus: expected distinct comma-separated GPU indices or UUIDs, got {gpus!r}")
        if len(ids) != per_node:
            raise ComposeOverrideError(f"--gpus: {len(ids)} GPU(s) given but each node runs {per_node} rank(s) "
                                       f"(serving.tensor_parallel_size / serving.nodes)")
        device["device_ids"] = ids
    else:
        device["count"] = per_node
    device["capabilities"] = ["gpu"]
    return device


def role_document(recipe: Recipe, command: RoleCommand, *, image: generate.ImagePin,
                  models_dir: Optional[str] = None, gpus: Optional[str] = None) -> dict:
    """One role's compose document as plain data (pure): the single-node service on host networking."""
    doc = copy.deepcopy(generate.compose_document(recipe, image=image, models_dir=models_dir, gpu_reservation=False))
    service = doc["services"].pop(generate.SERVICE)
    s = recipe.serving
    values = slot_values(recipe, command)
    # Slot values carry Compose variables: they are not escaped; every fixed element is.
    service["command"] = [a if i in command.slots.values() else generate._escape(a)
                          for i, a in enumerate(command.fill(**values))]
    service.pop("ports")  # host networking: the API server binds serving.host_ip itself (--host)
    service["network_mode"] = "host"
    service["environment"].update(INTERFACE)
    service["labels"][NODE_ROLE] = command.role
    if command.role == LEADER:
        probe_host = "127.0.0.1" if s.host_ip == "0.0.0.0" else s.host_ip
        service["healthcheck"]["test"][-1] = service["healthcheck"]["test"][-1].replace(
            f"http://127.0.0.1:{s.port}/", f"http://{probe_host}:{s.port}/")
    else:
        service["healthcheck"] = {"disable": True}  # headless: no API server to ask
    service["deploy"] = {"resources": {"reservations": {"devices": [_gpu_devices(recipe, gpus)]}}}
    doc["name"] = f"{doc['name']}-{command.role}"
    doc["services"] = {command.role: service}
    return doc


def _header(recipe: Recipe, command: RoleCommand) -> list[str]:
    nodes = recipe.serving.nodes
    lines = [
        "#",
        f"# MULTI-NODE ({nodes} machines, {recipe.serving.tensor_parallel_size // nodes} rank(s) each): this is the "
        f"{command.role.upper()} file.",
    ]
    if command.role == LEADER:
        lines.append(f"#   Run it on the leader machine (node rank 0, serves the API on {recipe.serving.host_ip}:{recipe.serving.port}).")
    else:
        lines.append("#   Run it on every other machine (headless: joins the leader's tensor-parallel group, no API).")
    lines += [
        "#   Set on every machine (shell, or ./.env next to this file):",
        f"#     {LEADER_ADDRESS_VARIABLE}  the leader's address on the network between the nodes",
        "#     NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME  the interface that reaches the other nodes",
    ]
    if command.role == WORKER and nodes > 2:
        lines.append(f"#     {NODE_RANK_VARIABLE}  this worker's node rank (1 to {nodes - 1}, each worker its own)")
    lines.append(f"#   The leader listens for the group on {LEADER_ADDRESS_VARIABLE}:{MASTER_PORT} (TCP; open it between the nodes).")
    return lines


def render_role(recipe: Recipe, command: RoleCommand, *, image: generate.ImagePin,
                models_dir: Optional[str] = None, gpus: Optional[str] = None) -> str:
    doc = role_document(recipe, command, image=image, models_dir=models_dir, gpus=gpus)
    body = yaml.dump(doc, Dumper=generate._Dumper, sort_keys=False, default_flow_style=False, width=2**16,
                     allow_unicode=True)
    out = []
    for line in body.splitlines():
        if line.startswith("    image: ") and not image.digest:
            out.append("    # UNPINNED: tag only, no digest; this tag can be moved to another image.")
        out.append(line)
    header = [f"# The leader's API server binds {recipe.serving.host_ip}:{recipe.serving.port} on the host "
              "(serving.host_ip; host networking, nothing is published)." if line.startswith("# The port is published")
              else line for line in generate._header(recipe, image)]
    start = next(i for i, line in enumerate(header) if line.startswith("# Start:"))
    header[start] = (f"# Start: docker compose -f <this file> up -d   (on the {command.role} machine; "
                     "needs the NVIDIA container toolkit)")
    return "\n".join(header[:start + 1] + _header(recipe, command) + header[start + 1:] + out) + "\n"


def _generated_for(recipe: Recipe, role: str, text: str) -> bool:
    return generate._generated_for(recipe, text) and f"{NODE_ROLE}: {role}\n" in text


def check_values(recipe: Recipe, command: RoleCommand, rank: Optional[int] = None) -> dict[str, str]:
    """The variables as a user sets them for the checks (a worker's rank when there are several)."""
    values = dict(CHECK_VALUES)
    if command.role == WORKER and recipe.serving.nodes > 2:
        values[NODE_RANK_VARIABLE] = str(rank if rank is not None else 1)
    return values


def resolved_argv(recipe: Recipe, command: RoleCommand, variables: dict[str, str]) -> list[str]:
    """The argv a container of this role receives once Compose has read ``variables``."""
    values = {SLOT_HOST: recipe.serving.host_ip, SLOT_MASTER_ADDR: variables[LEADER_ADDRESS_VARIABLE]}
    if SLOT_NODE_RANK in command.slots:
        values[SLOT_NODE_RANK] = "1" if recipe.serving.nodes == 2 else variables[NODE_RANK_VARIABLE]
    return command.fill(**values)


def _serve_cases(recipe: Recipe, commands) -> list[tuple[str, list[str]]]:
    """Every argv the files can start: the leader, and a worker at each rank."""
    cases = []
    for command in commands:
        ranks = range(1, recipe.serving.nodes) if command.role == WORKER else [None]
        for rank in ranks:
            where = command.role if rank is None else f"{command.role} (node rank {rank})"
            cases.append((where, resolved_argv(recipe, command, check_values(recipe, command, rank))))
    return cases


def write_role_files(recipe: Recipe, *, output_dir: Optional[Path] = None, owner: Optional[str] = None,
                     repository: Optional[str] = None, models_dir: Optional[str] = None, port: Optional[int] = None,
                     gpus: Optional[str] = None, digest: Optional[str] = None, report_path: Optional[Path] = None,
                     validate: bool = True) -> dict:
    """Render each role's file, check them (vLLM's serve parser, Docker Compose), then write all or none."""
    from stackbuild.serve.validate import ComposeInvalid, check_compose_file, check_serve_args, run_serve_parser_cases

    if port is not None:
        raise ComposeOverrideError("--port: a multi-node recipe's leader binds serving.port on the host "
                                   "(host networking); set serving.port in the recipe")
    flag = "-o" if output_dir else "compose"
    if output_dir is not None and not Path(output_dir).is_dir():
        raise OutputError(f"-o {output_dir}: a multi-node recipe writes one file per role into a directory; "
                          "this is not an existing directory")
    image = generate.resolve_image(recipe, owner=owner, repository=repository, digest=digest, report_path=report_path)
    commands = role_commands(recipe)
    files = [RoleFile(c.role, default_path(recipe, c.role, Path(output_dir) if output_dir else None),
                      render_role(recipe, c, image=image, models_dir=models_dir, gpus=gpus), c) for c in commands]
    generate._check_geometry(recipe)
    for f in files:
        check_output(f.path, flag, ours=lambda old, role=f.role: _generated_for(recipe, role, old))
    checks: dict[str, dict] = {}
    if validate:
        cases = _serve_cases(recipe, commands)
        verdicts = run_serve_parser_cases([argv for _where, argv in cases])
        for (where, argv), verdict in zip(cases, verdicts):
            serve = check_serve_args(argv, where=f"{recipe.path} ({where})", result=verdict)
            checks[f"serve_args {where}"] = serve.as_dict()
            if serve.status == "skipped":
                generate.notice(f"vLLM serve-parser check skipped: {serve.detail}")
                break
    tmps: list[Path] = []
    try:
        for f in files:
            try:
                fd, name = tempfile.mkstemp(prefix=f".{f.path.name}.", suffix=".tmp", dir=f.path.parent)
            except OSError as exc:
                raise OutputError(f"{flag} {f.path}: cannot write in {f.path.parent}: {exc.strerror or exc}") from None
            tmps.append(Path(name))
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(f.text)
            os.chmod(name, 0o644)
            if validate:
                variables = check_values(recipe, f.command)
                config = check_compose_file(Path(name), where=str(f.path), variables=variables)
                checks[f"compose_config {f.role}"] = {"status": config.status, "detail": config.detail}
                if config.status == "skipped":
                    generate.notice(f"docker compose config check skipped: {config.detail}")
                    continue
                resolved = config.parsed["services"][f.role]["command"]
                expected = [generate._escape(a) for a in resolved_argv(recipe, f.command, variables)]
                if resolved != expected:
                    raise ComposeInvalid(f"{f.path}: docker compose reads the command as {resolved!r}, not {expected!r}")
        for f, tmp in zip(files, tmps):
            try:
                tmp.replace(f.path)
            except OSError as exc:
                raise OutputError(f"{flag} {f.path}: cannot write: {exc.strerror or exc}") from None
    finally:
        for tmp in tmps:
            if tmp.exists():
                tmp.unlink()
    generate.image_notices(image)
    return {
        "paths": {f.role: str(f.path) for f in files},
        "image": image.reference,
        "pinned": bool(image.digest),
        "digest_source": image.digest_source or None,
        "unpinned_because": image.unpinned_because or None,
        "owner_note": image.owner_note or None,
        "nodes": recipe.serving.nodes,
        "commands": {f.role: list(f.command.argv) for f in files},
        "slots": {f.role: dict(f.command.slots) for f in files},
        "variables": [LEADER_ADDRESS_VARIABLE, *INTERFACE_VARIABLES]
                     + ([NODE_RANK_VARIABLE] if recipe.serving.nodes > 2 else []),
        "checks": checks,
    }
