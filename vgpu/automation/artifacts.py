"""What a `vgpu playbook run` keeps for debugging: ansible-runner's artifacts of a failed or interrupted run (its
events, Ansible's output, the command line and rc), copied out of the private data directory before that is
removed, with every secret taken out.

Kept under ``--artifacts-dir`` (default ``$XDG_STATE_HOME/vgpu/playbook-runs``, else
``~/.local/state/vgpu/playbook-runs``), one directory per run named ``<UTC time>-<playbook>``: directories 0700,
files 0600, written atomically (vgpu.fsutil.atomic_write). What is never kept: ansible-runner's ``env/`` (the
extra variables file, passwords, ssh key), the staged inventory (the operator has it). Secret values (extra
variables whose name says pass, secret, token, key or credential, and a vault password) are replaced by
``<redacted>`` wherever they appear in a kept file; ``vgpu-run.json`` says what ran, its variables redacted.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from vgpu.errors import InputError
from vgpu.fsutil import atomic_write

REDACTED = "<redacted>"
MIN_SECRET = 3  # shorter values would redact ordinary words ("1", "no") without protecting anything
MAX_FILE = 64 << 20  # a kept file larger than this is cut (a run's stdout at -vvvv can be large)


def default_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "vgpu" / "playbook-runs"


def check_dir(path: Path) -> Path:
    """The artifacts directory, checked before anything runs (exit 5): a file, a symlink or a directory another
    user owns is refused. It is created (0700) only when a run is kept: a run that succeeds writes nothing."""
    path = Path(os.path.abspath(path))
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise InputError(f"--artifacts-dir {path}: not a directory")
    if path.exists() and path.stat().st_uid != os.geteuid():
        raise InputError(f"--artifacts-dir {path}: owned by another user; vgpu keeps run artifacts (which can "
                         "hold host details) only in a directory of its own user")
    return path


def scrub(text: str, secrets: list[str]) -> str:
    for value in sorted(secrets, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def secrets_of(extra_vars: dict[str, Any], secret_name, others: list[str]) -> list[str]:
    values = [str(v) for k, v in extra_vars.items() if secret_name.search(k)] + list(others)
    return [v for v in values if len(v) >= MIN_SECRET]


def _command_without_env(text: str) -> str:
    """ansible-runner's ``command`` file holds the whole environment of the controller (cloud tokens, proxies with
    passwords...): kept are the command line, its directory and the names of the variables, not their values."""
    try:
        doc = json.loads(text)
    except ValueError:
        return ""
    if not isinstance(doc, dict):
        return ""
    env = doc.pop("env", None)
    doc["env_names"] = sorted(env) if isinstance(env, dict) else []
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def keep(source: Path, dest_root: Path, playbook: str, summary: dict[str, Any], secrets: list[str]) -> Path:
    """Copy ansible-runner's artifact directory ``source`` (private_data_dir/artifacts/<ident>) to a new run
    directory under ``dest_root``; returns it."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest_root.mkdir(mode=0o700, parents=True, exist_ok=True)
    dest = dest_root / f"{stamp}-{playbook}"
    n = 1
    while dest.exists():
        n += 1
        dest = dest_root / f"{stamp}-{playbook}-{n}"
    dest.mkdir(mode=0o700)
    if source.is_dir():
        for path in sorted(source.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue
            target = dest / path.relative_to(source)
            if path.is_dir():
                target.mkdir(mode=0o700, exist_ok=True)
                continue
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(path, "rb") as fh:
                text = fh.read(MAX_FILE).decode("utf-8", "replace")
            if path.name == "command" and path.parent == source:
                text = _command_without_env(text)
            atomic_write(target, scrub(text, secrets), mode=0o600, durable=False)
    atomic_write(dest / "vgpu-run.json", scrub(json.dumps(summary, indent=2, sort_keys=True), secrets) + "\n",
                 mode=0o600)
    return dest
