"""The controller-side state of an ESXi host: ``$VGPU_STATE_DIR/esxi/<hardware uuid>/`` (the lock, the
journal, the record of the applied profile).

vgpu acts on what this directory says (a journal's rollback reconfigures real VMs; the record says which
GPUs' passthrough release turns off), so it is trusted as the roll-out's state directory is
(vgpu/rollout/state.py): every directory from ``esxi/`` down, and the files vgpu reads there, must belong
to the user vgpu runs as and be writable by nobody else, and none may be a symbolic link. vgpu creates
the directories itself with mode 0700. A record whose schema this vgpu does not read is refused, never
taken for "nothing recorded".
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from vgpu.errors import InputError
from vgpu.inputs import InputFileError, describe_mode, parse_json
from vgpu.persist import STATE_SCHEMA

STATE_ENV = "VGPU_STATE_DIR"
FILES = ("journal.json", "state.json", "lock")


def state_root() -> Path:
    """Where vgpu keeps per-host state for hosts it reaches remotely: $VGPU_STATE_DIR, else
    /var/lib/vgpu for root, else $XDG_STATE_HOME/vgpu (~/.local/state/vgpu)."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    if os.geteuid() == 0:
        return Path("/var/lib/vgpu")
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "vgpu"


def _trusted(path: Path, what: str) -> bool:
    """False when ``path`` does not exist; InputError when someone else could have written it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be checked: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(f"{what} {path} is a symbolic link; vgpu acts only on its own state files",
                         hint=f"remove it: vgpu creates {path.name} itself")
    kind_ok = stat.S_ISDIR(st.st_mode) if what == "ESXi state directory" else stat.S_ISREG(st.st_mode)
    if not kind_ok:
        raise InputError(f"{what} {path} is {describe_mode(st.st_mode)}; vgpu will not use it")
    if st.st_uid != os.geteuid():
        raise InputError(f"{what} {path} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}); vgpu "
                         "changes the host as its journal and record say, so only their owner may write them",
                         hint=f"remove {path} if you did not create it, or run vgpu as its owner")
    if st.st_mode & 0o022:
        raise InputError(f"{what} {path} is writable by others (mode {stat.S_IMODE(st.st_mode):04o}); vgpu changes "
                         "the host as its journal and record say, so only their owner may write them",
                         hint=f"chmod go-w {path}, after checking what is in it")
    return True


def check(state_dir: Path, *, create: bool = False) -> None:
    """The ESXi state directory of one host, and the files in it, are this user's alone (InputError,
    exit 5, otherwise). ``create``: make the missing directories (mode 0700) first."""
    for directory in (state_dir.parent, state_dir):
        if not _trusted(directory, "ESXi state directory") and create:
            try:
                directory.mkdir(mode=0o700, parents=True)
            except FileExistsError:  # another run made it in the meantime: check that one
                pass
            except OSError as exc:
                raise InputError(f"cannot create the ESXi state directory {directory}: {exc.strerror}",
                                 hint="run as root, or set VGPU_STATE_DIR to a directory of your own") from None
            _trusted(directory, "ESXi state directory")
    for name in FILES:
        _trusted(state_dir / name, "ESXi state file")


def parse_record(text: str | None, where: Path) -> dict | None:
    """The record as a dict (None when there is none). A damaged record, or one with a schema this vgpu
    does not read, is an InputError: treating it as "nothing recorded" would hide what vgpu changed."""
    if text is None:
        return None
    try:
        data = parse_json(text, "ESXi record", where)
    except InputFileError as exc:
        raise InputError(f"the record {where} is damaged: {exc.problem}",
                         hint="inspect it; `vgpu provision --profile NAME` writes a new one") from None
    if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise InputError(f"the record {where} has schema {str(found)[:60]!r}; this vgpu reads {STATE_SCHEMA}",
                         hint="it was written by another vgpu version: run that one, or inspect and remove it")
    return data


def dumps(data: dict) -> str:
    return json.dumps(data, sort_keys=True, indent=2) + "\n"

