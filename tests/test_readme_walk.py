"""Every README command runs as written, in order, on a fresh copy of the repository.

The README's ```sh blocks are parsed and walked top to bottom in a copy of the tracked
files (its own `var/`, the test's virtualenv linked as `.venv`): `make run` starts the
quick start's stack (SQLite, the embedded broker, web + worker + beat, what the
Makefile's `run` target does, checked below), then each command runs in bash in the
copy. What cannot run as written here is listed in SKIPPED with the reason, and a
command of the README that is neither walked nor skipped fails the test, so the README
and this walk cannot drift apart. Placeholders are filled from what earlier commands
printed: `<id>` the last job or batch id, `file-...` the last file id; the documented
port 8000 becomes the stack's free port; `[--option]` (optional) is left out.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.quickstart import QuickStart
from tests.realparts import BIN_DIR, ROOT

pytestmark = pytest.mark.realparts

README = ROOT / "README.md"
# Commands the walk does not run, each with why (matched by their start).
SKIPPED = {
    "make test": "the whole suite: it is what runs this test",
    "make fuzz": "schemathesis, minutes long; run by .ci/run",
    "make lint": "development, run by .ci/run",
    "make check-migrations schema": "development, run by .ci/run",
    "make bench": "benchmarks, minutes long",
    ".venv/bin/python bench/bench_accept.py": "a benchmark (git worktrees, minutes long)",
    "bash .ci/run": "CI itself",
    "export DATABASE_URL=": "production shape: PostgreSQL",
    "export CELERY_BROKER_URL=": "production shape: Redis",
    "celery -A deploy worker -Q": "the production split: long-running workers per queue",
    "celery -A deploy beat": "production: a long-running beat (make run starts one)",
    'curl -s -H "Authorization: Bearer $METRICS_TOKEN" https://host/': "production host",
    "make image": "deployment: podman; .ci/run runs it",
    "make compose-test": "deployment: podman; .ci/run runs it (the stack, this walk's curls, the SDK)",
    "make k8s-check": "deployment: .ci/run runs it",
    "cp deploy/compose.env.example": "deployment: the compose stack (make compose-test)",
    "bash .ci/containers.sh services": "deployment: podman images (make compose-test)",
    "podman-compose ": "deployment: the compose stack (make compose-test runs it)",
    "deploy/containers/compose-up.sh": "deployment: the compose stack (make compose-test runs it)",
    "kubectl ": "deployment: a Kubernetes cluster (make k8s-check renders and validates)",
    "podman run --rm -v lifecycle_media": "deployment: a backup of the compose stack's volume",
    "pg_restore ": "deployment: a restore into the production database",
    "python manage.py createsuperuser": "operators: interactive, in a deployed container",
    "python manage.py staff_2fa ": (
        "operators, in a deployed container; tests/routing/admin/test_staff_2fa.py runs them"
    ),
    "python manage.py axes_reset_username": "operators; tests/routing/admin run it",
    ".venv/bin/python manage.py replay --trace data/traces/azure-llm-2023-code.csv": (
        "the README's replay table, ~15 minutes; tests/routing/replay run the command"
    ),
}
# The README block where PostgreSQL/Redis replace the quick start's parts: not walked.
PRODUCTION_BLOCK_MARK = "export DATABASE_URL="
WALK_SECONDS = 110  # the brief: under 2 minutes


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)


def _complete(command: str) -> bool:
    """Whether `command` is a whole shell command (quotes closed, no trailing `\\`,
    heredoc ended)."""
    heredoc = re.search(r"<<'?(\w+)'?", command)
    if heredoc and not re.search(rf"^{heredoc.group(1)}$", command, flags=re.M):
        return False
    if command.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(command, comments=not heredoc)
    except ValueError:
        return False
    return True


def commands_of(block: str) -> list[str]:
    """The block's commands (continuations, heredocs and multi-line quotes joined);
    comment-only lines dropped."""
    out, pending = [], ""
    for line in block.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending = f"{pending}\n{line}" if pending else line
        if _complete(pending):
            out.append(pending)
            pending = ""
    assert not pending, f"unfinished command in the README: {pending!r}"
    return out


def readme_commands() -> list[str]:
    return [
        c
        for b in sh_blocks(README.read_text())
        if PRODUCTION_BLOCK_MARK not in b
        for c in commands_of(b)
    ]


def skip_reason(command: str) -> str | None:
    return next((why for start, why in SKIPPED.items() if command.startswith(start)), None)


def test_the_readme_parses_into_the_commands_the_walk_knows():
    commands = readme_commands()
    assert commands[0].startswith("make run")
    assert any("batch submit var/nightly.jsonl --window 8h --wait" in c for c in commands)
    assert any(c.startswith(".venv/bin/python manage.py demo_traffic") for c in commands)
    # Every skip still names a README command (a stale entry would hide nothing).
    text = "\n".join(sh_blocks(README.read_text()))
    for start in SKIPPED:
        assert start in text, f"SKIPPED entry {start!r} is no longer in the README"
    # Anything else is walked: no command is silently left out.
    walked = [c for c in commands if not skip_reason(c)]
    assert len(walked) >= 20, walked


def test_make_run_is_what_the_walk_starts():
    """The walk starts `make run` as QuickStart does; the Makefile says the same."""
    target = re.search(r"^run: install\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert target, "no `run` target in the Makefile"
    assert [line.strip() for line in target.group(1).splitlines()] == [
        "$(PY) manage.py migrate --noinput",
        "$(PY) manage.py loadcatalog",
        "$(PY) manage.py demo_setup",
        "exec bash deploy/run.sh",
    ]


def fresh_copy(dest: Path) -> Path:
    """The tracked files of the checkout (as they are on disk) in `dest`, with the test's
    virtualenv as `.venv`."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / name.decode()
        if src.is_file():
            target = dest / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    (dest / ".venv").symlink_to(BIN_DIR.parent)
    return dest


class Walk:
    def __init__(self, root: Path, qs: QuickStart):
        self.root, self.qs = root, qs
        self.env = dict(qs.env)
        self.last_id: str | None = None
        self.last_file: str | None = None
        self.log: list[str] = []

    def fill(self, command: str) -> str:
        port = self.env["PORT"]
        command = command.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        command = re.sub(r" \[--[\w-]+\]", "", command)  # optional flags: left out
        if "<id>" in command:
            assert self.last_id, f"no id printed before {command!r}"
            command = command.replace("<id>", self.last_id)
        if "file-..." in command:
            assert self.last_file, f"no file id printed before {command!r}"
            command = command.replace("file-...", self.last_file)
        return command

    def remember(self, out: str) -> None:
        for value in re.findall(r'"id": ?"([^"]+)"', out):
            if value.startswith("file-"):
                self.last_file = value
            else:
                self.last_id = value
        for value in re.findall(r"^Batch ([0-9a-f-]{36})", out, flags=re.M):
            self.last_id = value

    def run(self, command: str) -> str:
        filled = self.fill(command)
        if re.match(r"^KEY=\$\((.*)\)", filled.split("#")[0].strip()):
            # An assignment the following commands use: kept in the walk's environment.
            inner = re.match(r"^KEY=\$\((.*)\)", filled.split("#")[0].strip()).group(1)
            self.env["KEY"] = self._bash(inner).strip()
            assert self.env["KEY"].startswith("mlr_"), self.env["KEY"]
            return self.env["KEY"]
        out = self._bash(filled)
        if filled.lstrip().startswith("curl"):
            assert "/problems/" not in out, f"{command!r} answered a problem:\n{out[:2000]}"
        self.remember(out)
        return out

    def _bash(self, command: str) -> str:
        started = time.monotonic()
        r = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        self.log.append(f"{time.monotonic() - started:6.1f} s  {command.splitlines()[0][:100]}")
        assert r.returncode == 0, (
            f"README command failed ({r.returncode}): {command}\n"
            f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
        )
        return r.stdout


def test_every_readme_command_runs_as_written_in_order(tmp_path):
    root = fresh_copy(tmp_path / "repo")
    # SIM_TIME_SCALE as the README suggests for the batch demo (`SIM_TIME_SCALE=200 make
    # run`, and the same for the command).
    qs = QuickStart(root / "var", root=root, SIM_TIME_SCALE=200, JOB_SWEEP_SECONDS=1)
    walk = Walk(root, qs)
    started = time.monotonic()
    outputs: dict[str, str] = {}
    try:
        for command in readme_commands():
            if skip_reason(command):
                continue
            if command.startswith("make run"):
                qs.setup()
                qs.start()
                walk.env = {**qs.env, **{k: v for k, v in walk.env.items() if k == "KEY"}}
                continue
            outputs[command] = walk.run(command)
    except BaseException:
        qs.dump_logs()
        print("\n".join(walk.log))
        raise
    finally:
        qs.close()
    print("\n".join(walk.log))
    elapsed = time.monotonic() - started
    print(f"README walk: {len(outputs)} commands in {elapsed:.1f} s")

    def out_of(start: str) -> str:
        return next(v for k, v in outputs.items() if k.startswith(start))

    # A few facts the README promises, checked on what the commands printed.
    job = json.loads(
        out_of('curl -s -H "Authorization: Bearer $KEY" http://127.0.0.1:8000/api/v1/jobs/<id>')
    )
    assert job["object"] == "job"
    assert "Batch" in out_of(".venv/bin/python manage.py batch submit var/nightly.jsonl")
    cancelled = out_of(".venv/bin/python manage.py batch list;")
    assert "cancelled" in cancelled, cancelled
    assert (root / "var" / "nightly.jsonl").exists() and (root / "var" / "tiers.png").exists()
    # Nothing written outside var/ (and the linked .venv) by the commands.
    stray = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.split(b"\0")
    tracked = {s.decode() for s in stray if s}
    extra = [
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and p.relative_to(root).parts[0] not in ("var", ".venv")
        and "__pycache__" not in p.parts
        and str(p.relative_to(root)) not in tracked
    ]
    assert not extra, f"README commands wrote outside var/: {extra[:10]}"
    assert os.path.isdir(root / "var")
