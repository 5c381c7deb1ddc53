"""The start-time checks of what is mounted, beyond the geometry (stdlib only, headers only).

Each check names the file, key or flag at fault in one line. CheckpointUnusable (exit 16):
a file the serve command needs is missing or corrupt (a shard, a header, the tokenizer or
chat template a served parser needs). CheckpointMismatch (exit 26): the files are whole but
are not what the recipe and the argv say they are (another revision, another quantization
or precision, a drafter wired to layers or a width the target does not have, a
num_speculative_tokens that is not the drafter's block minus one).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from geometry.image_contract import Role
from geometry.model.config import text_config
from geometry.preflight.checked import CheckedModel, CheckedServe
from geometry.preflight.checkpoint import Checkpoint, CheckpointUnusable, scan
from geometry.preflight.configs import MountedConfig
from geometry.preflight.outcome import PREFIX
from geometry.preflight.serve_flags import ServeFlags

QUANT_FILE = "hf_quant_config.json"
UNQUANTIZED = "none"
# A ModelOpt quant_algo -> vLLM's quantization name for it.
MODELOPT_NAMES = {"NVFP4": "modelopt_fp4", "FP8": "modelopt"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tiktoken.model", "vocab.json")
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
TOKENIZER_CONFIG = "tokenizer_config.json"


class CheckpointMismatch(Exception):
    """The mounted checkpoints are not the recipe's, or do not fit each other or the argv (one line)."""


@dataclass(frozen=True)
class Mounted:
    """Both checkpoints as scanned, and the notices the checks found (not refusals)."""

    target: Checkpoint
    drafter: Optional[Checkpoint]
    notices: tuple[str, ...]

    @property
    def tensor_bytes(self) -> int:
        return self.target.tensor_bytes + (self.drafter.tensor_bytes if self.drafter else 0)

    def summary(self) -> str:
        parts = []
        for ckpt in (self.target, self.drafter):
            if ckpt is not None:
                commit = ckpt.snapshot.commit
                parts.append(
                    f"{ckpt.role} {len(ckpt.shards)} shard{'s' if len(ckpt.shards) != 1 else ''}, "
                    + (f"snapshot {commit[:12]}" if commit else "a plain directory: no commit")
                )
        return "weights headers complete (" + "; ".join(parts) + ")"


# --- 1. identity -------------------------------------------------------------------------


def identity(ckpt: Checkpoint, model: CheckedModel) -> list[str]:
    """CheckpointMismatch for a commit other than the pinned one; notices for what cannot be compared."""
    snap = ckpt.snapshot
    if snap.commit is None:  # the outcome's summary says "a plain directory: no commit"
        return (
            [
                f"{PREFIX} notice: {snap.describe()}: the pinned {ckpt.role}.revision {model.revision[:12]} "
                "cannot be compared"
            ]
            if model.revision
            else []
        )
    out = []
    if snap.repo is not None and snap.repo.lower() != model.id.lower():
        out.append(
            f"{PREFIX} notice: the {ckpt.role} {ckpt.directory} is a snapshot of {snap.repo}, "
            f"not of the recipe's {model.id}"
        )
    if model.revision is None:
        out.append(
            f"{PREFIX} notice: the {ckpt.role} is {snap.describe()}, the recipe pins no {ckpt.role}.revision: "
            f"`build.py pin --recipe R --models-dir DIR` writes {snap.commit}"
        )
    elif model.revision != snap.commit:
        raise CheckpointMismatch(
            f"the {ckpt.role} {ckpt.directory} is {snap.describe()}, not the recipe's "
            f"{ckpt.role}.revision {model.revision}"
        )
    return out


# --- 3. quantization and precision --------------------------------------------------------


def _modelopt_name(algo) -> str:
    return MODELOPT_NAMES.get(str(algo).upper(), f"modelopt ({algo})")


def _read_json(path: str) -> Mapping:
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read())
    except IsADirectoryError:
        raise CheckpointUnusable(f"{path} is a directory, not a file") from None
    except OSError as exc:
        raise CheckpointUnusable(f"{path} cannot be read: {exc.strerror}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        why = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "not UTF-8 text"
        raise CheckpointUnusable(f"{path} is not JSON ({why})") from None
    if not isinstance(data, dict):
        raise CheckpointUnusable(f"{path} holds JSON but not an object")
    return data


def target_quantization(directory: str, config: MountedConfig) -> tuple[str, str]:
    """(vLLM's quantization name, the file and key that say it) for the checkpoint in ``directory``."""
    found = []
    quant_file = os.path.join(directory, QUANT_FILE)
    if os.path.lexists(quant_file):
        data = _read_json(quant_file)
        producer = data.get("producer") if isinstance(data.get("producer"), dict) else {}
        quant = data.get("quantization") if isinstance(data.get("quantization"), dict) else {}
        if str(producer.get("name", "")).lower() != "modelopt" or "quant_algo" not in quant:
            raise CheckpointUnusable(
                f"{quant_file}: expected ModelOpt's producer.name modelopt and quantization.quant_algo"
            )
        found.append(
            (_modelopt_name(quant["quant_algo"]), f"{quant_file} quantization.quant_algo {quant['quant_algo']}")
        )
    qc = config.data.get("quantization_config")
    if isinstance(qc, dict):
        method = str(qc.get("quant_method", "")).lower()
        algo = qc.get(
            "quant_algo",
            (qc.get("quantization") or {}).get("quant_algo") if isinstance(qc.get("quantization"), dict) else None,
        )
        name = _modelopt_name(algo) if method == "modelopt" and algo is not None else method or "unknown"
        found.append(
            (
                name,
                f"{config.path} quantization_config.quant_method {method}"
                + (f" quant_algo {algo}" if algo is not None else ""),
            )
        )
    if not found:
        return UNQUANTIZED, f"{directory} has no {QUANT_FILE} and config.json no quantization_config"
    if len({name for name, _ in found}) > 1:
        raise CheckpointMismatch(
            f"the target's quantization files disagree: {found[0][1]} is {found[0][0]}, {found[1][1]} is {found[1][0]}"
        )
    return found[0]


def check_quantization(ckpt: Checkpoint, config: MountedConfig, model: CheckedModel) -> None:
    if model.quantization is None:
        return
    name, where = target_quantization(ckpt.directory, config)
    if name != model.quantization:
        raise CheckpointMismatch(
            f"{where}: the target is {name}, the recipe's target.quantization is {model.quantization}"
        )


def check_precision(ckpt: Checkpoint, model: CheckedModel) -> None:
    """The drafter's tensor dtypes (from the headers) are those of ``drafter.precision``."""
    if model.precision is None:
        return
    dtypes = ckpt.dtypes()
    where = f"the drafter {ckpt.directory}"
    if model.precision == "bf16":
        other = sorted(d for d in dtypes if d not in ("BF16", "F32"))
        if other or "BF16" not in dtypes:
            d = other[0] if other else next(iter(sorted(dtypes)), "no")
            raise CheckpointMismatch(
                f"{where} holds {d} tensors (e.g. {dtypes.get(d, '-')}), not the BF16 of drafter.precision bf16"
            )
    elif model.precision == "mxfp8":
        scales = [
            n for s in ckpt.shards for n, t in s.tensors.items() if n.endswith("scale") and t.dtype in ("U8", "F8_E8M0")
        ]
        if "F8_E4M3" not in dtypes or not scales:
            missing = "no F8_E4M3 tensor" if "F8_E4M3" not in dtypes else "no E8M0 block scales (U8 / F8_E8M0 *scale)"
            raise CheckpointMismatch(
                f"{where} has {missing}: not the MXFP8 of drafter.precision mxfp8 (dtypes: {', '.join(sorted(dtypes))})"
            )


# --- 4. drafter wiring --------------------------------------------------------------------


def check_wiring(target: MountedConfig, drafter: MountedConfig, flags: ServeFlags) -> None:
    text = text_config(target.data)
    layers, hidden = text.get("num_hidden_layers"), text.get("hidden_size")
    dflash = drafter.data.get("dflash_config") if isinstance(drafter.data.get("dflash_config"), dict) else {}
    ids = dflash.get("target_layer_ids")
    if ids is not None:
        if not isinstance(ids, list) or not ids:
            raise CheckpointMismatch(f"{drafter.path}: dflash_config.target_layer_ids: not a list of layer numbers")
        for i in ids:
            if not isinstance(i, int) or isinstance(i, bool) or i < 0 or (isinstance(layers, int) and i >= layers):
                raise CheckpointMismatch(
                    f"{drafter.path}: dflash_config.target_layer_ids: layer {i!r} is not one of "
                    f"the target's {layers} layers (0-{layers - 1 if isinstance(layers, int) else '?'}, "
                    f"num_hidden_layers of {target.path})"
                )
    width = drafter.data.get("target_hidden_size")
    if width is not None and hidden is not None and width != hidden:
        raise CheckpointMismatch(
            f"{drafter.path}: target_hidden_size {width} is not the target's hidden_size {hidden} ({target.path})"
        )
    block = dflash.get("block_size")
    served = flags.num_speculative_tokens
    if isinstance(block, int) and served is not None and served != block - 1:
        raise CheckpointMismatch(
            f"--speculative-config num_speculative_tokens {served}: the drafter's "
            f"dflash_config.block_size {block} ({drafter.path}) drafts {block - 1} "
            "(its block minus the target's own token)"
        )


# --- 5. tokenizer and chat template -------------------------------------------------------


def check_tokenizer(flags: ServeFlags, target_dir: str, locate: Callable[[str], str]) -> list[str]:
    parsers = [
        f"--{name.replace('_', '-')} {value}"
        for name, value in (("tool_call_parser", flags.tool_call_parser), ("reasoning_parser", flags.reasoning_parser))
        if value
    ]
    if not parsers:
        return []
    directory = target_dir if flags.tokenizer is None else locate(flags.tokenizer)
    if not os.path.isdir(directory):
        return [f"{PREFIX} notice: --tokenizer {flags.tokenizer} is not a directory here: its files are not checked"]
    need = " and ".join(parsers)
    if not any(os.path.isfile(os.path.join(directory, f)) for f in TOKENIZER_FILES):
        raise CheckpointUnusable(f"{directory} has no tokenizer ({', '.join(TOKENIZER_FILES)}), which {need} needs")
    if flags.chat_template is not None or any(os.path.isfile(os.path.join(directory, f)) for f in TEMPLATE_FILES):
        return []
    config = os.path.join(directory, TOKENIZER_CONFIG)
    if os.path.lexists(config) and _read_json(config).get("chat_template"):
        return []
    raise CheckpointUnusable(
        f"{directory} has no chat template ({', '.join(TEMPLATE_FILES)} or "
        f"{TOKENIZER_CONFIG} chat_template), which {need} needs (or give --chat-template)"
    )


# --- all of them ---------------------------------------------------------------------------


def check_mounted(
    checked: CheckedServe,
    flags: ServeFlags,
    target: MountedConfig,
    drafter: Optional[MountedConfig],
    locate: Callable[[str], str],
) -> Mounted:
    """Items 1-5 in order; CheckpointUnusable / CheckpointMismatch for the first that fails."""
    target_dir = os.path.dirname(target.path)
    target_ckpt = scan(Role.TARGET, target_dir)
    drafter_ckpt = scan(Role.DRAFTER, os.path.dirname(drafter.path)) if drafter is not None else None
    notices = identity(target_ckpt, checked.target)
    if drafter_ckpt is not None:
        notices += identity(drafter_ckpt, checked.drafter)
    check_quantization(target_ckpt, target, checked.target)
    if drafter_ckpt is not None and drafter is not None:
        check_precision(drafter_ckpt, checked.drafter)
        check_wiring(target, drafter, flags)
    notices += check_tokenizer(flags, target_dir, locate)
    return Mounted(target_ckpt, drafter_ckpt, tuple(notices))
