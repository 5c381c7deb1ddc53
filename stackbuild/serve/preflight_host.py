"""The image's start-time pre-flight, run on the host (`build.py preflight`).

The recipe's generated command (or, for a multi-node recipe, each role's command as the
compose files start it) plus any extra serve args is checked by the same code the
container's entrypoint runs, against the configs under a host directory laid out as
`compose --models-dir` mounts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from geometry import Fingerprint
from stackbuild.core.errors import PREFLIGHT_ERRORS, UsageError
from stackbuild.core.gate import gate_input
from stackbuild.core.preflight_record import checked_serve
from stackbuild.core.recipe import Recipe
from stackbuild.core.serve_args import LEADER, SlotValues, role_commands

SINGLE_NODE = "single-node"


@dataclass(frozen=True)
class CommandChecked:
    """One command's pre-flight outcome: ``role`` is SINGLE_NODE, LEADER or WORKER."""

    role: str
    argv: tuple[str, ...]
    exit_code: int  # 0: passed
    lines: tuple[str, ...]  # the pre-flight's lines; the first is its verdict
    fingerprint: Optional[Fingerprint] = None  # what a rank would send its leader, the image's part unknown

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class HostPreflight:
    recipe: str
    checks: tuple[CommandChecked, ...]

    @property
    def failed(self) -> Optional[CommandChecked]:
        return next((c for c in self.checks if not c.passed), None)

    def to_json(self) -> dict:
        failed = self.failed
        return {
            "recipe": self.recipe,
            "passed": failed is None,
            "exit_code": failed.exit_code if failed else 0,
            "checks": [
                {
                    "role": c.role,
                    "argv": list(c.argv),
                    "passed": c.passed,
                    "exit_code": c.exit_code,
                    "lines": list(c.lines),
                    **(
                        {"fingerprint": c.fingerprint.to_json(), "fingerprint_sha256": c.fingerprint.compared_sha256()}
                        if c.role != SINGLE_NODE and c.fingerprint is not None
                        else {}
                    ),
                }
                for c in self.checks
            ],
        }

    def report_lines(self) -> list[str]:
        """What stdout shows: every passing check's lines; a failing check's verdict goes to the error line.
        A node role's check ends with its fingerprint's sha256, the same on every node whose ranks would agree."""
        several = len(self.checks) > 1
        out = []
        for check in self.checks:
            lines = check.lines if check.passed else check.lines[1:]
            if check.role != SINGLE_NODE and check.fingerprint is not None:
                lines = (
                    *lines,
                    f"pre-flight: fingerprint sha256:{check.fingerprint.compared_sha256()} (checkpoints, "
                    "geometry, served flags; the image's part is the container's): run this on every "
                    "node, ranks that agree print the same",
                )
            out += [f"{check.role}: {line}" if several else line for line in lines]
        return out

    def raise_if_failed(self) -> None:
        failed = self.failed
        if failed is not None:
            verdict = failed.lines[0] if failed.lines else "pre-flight: FAIL"
            raise PREFLIGHT_ERRORS[failed.exit_code](f"{failed.role}: {verdict}" if len(self.checks) > 1 else verdict)


def _commands(
    recipe: Recipe,
    checked,
    role: Optional[str],
    leader_address: str,
    node_rank: int,
    explicit_role_options: tuple[str, ...],
) -> list[tuple[str, list[str]]]:
    """(role, argv) for every command to check."""
    commands = role_commands(recipe)
    if not commands:
        if explicit_role_options:
            raise UsageError(
                f"{explicit_role_options[0]}: recipe {recipe.name} serves on one node "
                f"(serving.nodes: {recipe.serving.nodes}); it has no node roles"
            )
        return [(SINGLE_NODE, list(checked.argv))]
    if role == LEADER and "--node-rank" in explicit_role_options:
        raise UsageError("--node-rank: the leader is node rank 0; give --role worker to check a worker's rank")
    # As the generated compose files start them: the API server binds serving.host_ip.
    values = SlotValues(host=recipe.serving.host_ip, master_addr=leader_address, node_rank=str(node_rank))
    return [(command.role, command.filled(values)) for command in commands if role is None or command.role == role]


def host_locator(recipe: Recipe, models_dir: Path) -> Callable[[str], str]:
    """A container path -> where it is on the host: under ``models_dir`` where `compose --models-dir`
    mounts it (the recipe's models directory), elsewhere the path itself."""
    mount = recipe.model_mount_point
    host_dir = str(Path(models_dir).resolve())

    def locate(path: str) -> str:
        if path == mount or path.startswith(mount.rstrip("/") + "/"):
            return host_dir + path[len(mount) :]
        return path

    return locate


def check_on_host(
    recipe: Recipe,
    models_dir: Path,
    *,
    role: Optional[str] = None,
    leader_address: str = "127.0.0.1",
    node_rank: int = 1,
    explicit_role_options: tuple[str, ...] = (),
    extra_args: tuple[str, ...] = (),
) -> HostPreflight:
    """Check the recipe's command(s) plus ``extra_args`` against the configs under ``models_dir``.

    ``explicit_role_options``: the role options the user gave (refused for a single-node recipe).
    """
    from geometry import run_preflight

    locate = host_locator(recipe, models_dir)
    checked = checked_serve(recipe, gate_input(recipe))
    results = []
    for name, argv in _commands(recipe, checked, role, leader_address, node_rank, explicit_role_options):
        full = (*argv, *extra_args)
        outcome = run_preflight(
            list(full),
            checked=checked,
            checked_path="(built from the recipe)",
            overlay_manifest=None,
            locate=locate,
            progress=True,
        )
        results.append(
            CommandChecked(
                role=name,
                argv=tuple(full),
                exit_code=outcome.code,
                lines=tuple(outcome.lines),
                fingerprint=outcome.fingerprint,
            )
        )
    return HostPreflight(recipe=recipe.name, checks=tuple(results))
