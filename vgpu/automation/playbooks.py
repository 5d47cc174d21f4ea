"""Run the collection's playbooks through ansible-runner, for operators working from the CLI.

`vgpu playbook run NAME --inventory FILE` checks the inventory with vgpu's one inventory reader
(vgpu.automation.inventory) before anything runs, stages exactly those bytes for ansible-runner, follows
the run through runner events (a callback per event, for the live display) and ends with a typed
result per host: ok, changed, failed or unreachable, with the failing task and its message.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vgpu.automation import interrupt
from vgpu.automation.inventory import Inventory, ansible_tool, read_inventory, stage
from vgpu.errors import ExitCode, InputError, InterruptedRun, VgpuError

SCHEMA = "vgpu.playbook-run/v1"
VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # an Ansible variable vgpu passes
SECRET_NAME = re.compile(r"pass|secret|token|key|credential", re.I)  # one whose value is never shown or kept
REDACTED = "<redacted>"


def content_dir() -> Path:
    """Where the playbooks/ and collections/ vgpu runs live: VGPU_ANSIBLE_DIR, else the checkout vgpu runs from
    (the repository root holds playbooks/, collections/ and ansible.cfg), else the copy a wheel carries as
    package data (vgpu/ansible_content, put there by setup.py)."""
    env = os.environ.get("VGPU_ANSIBLE_DIR")
    candidates = [Path(env)] if env else [packaged_content(), Path(__file__).resolve().parents[2]]
    for root in candidates:
        if (root / "playbooks").is_dir() and (root / "collections").is_dir():
            return root
    raise VgpuError(f"no playbooks/ and collections/ under {' or '.join(map(str, candidates))}",
                    hint="reinstall vgpu from its wheel or run it from its repository checkout, or set "
                         "VGPU_ANSIBLE_DIR to a copy of the checkout")


def collections_path(root: Path) -> str:
    """vgpu.instinct (root/collections) and the checkout's unpacked community.general first, then the operator's
    own collection paths (ANSIBLE_COLLECTIONS_PATH, else Ansible's defaults): a wheel install finds
    community.general wherever ansible-galaxy put it."""
    own = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or "~/.ansible/collections:/usr/share/ansible/collections"
    return os.pathsep.join([str(root / "collections"), str(root / ".cache" / "collections"), own])


def ansible_config(root: Path) -> str:
    """The ansible.cfg the run uses, in Ansible's own order: ANSIBLE_CONFIG, ./ansible.cfg (of the directory vgpu
    runs in: ansible-runner runs ansible-playbook elsewhere, so it is named explicitly), ~/.ansible.cfg,
    /etc/ansible/ansible.cfg; only where the site has none, vgpu's own. The collections path is set apart
    (collections_path), so a site's configuration never hides vgpu.instinct."""
    own = os.environ.get("ANSIBLE_CONFIG")
    if own:
        return own
    for path in (Path.cwd() / "ansible.cfg", Path.home() / ".ansible.cfg", Path("/etc/ansible/ansible.cfg")):
        if path.is_file():
            return str(path)
    return str(root / "ansible.cfg")


def packaged_content() -> Path:
    """The Ansible content inside the installed package (a wheel install; absent in a checkout)."""
    return Path(__file__).resolve().parents[1] / "ansible_content"


def playbooks(root: Path | None = None) -> dict[str, Path]:
    """The shipped playbooks by name (file name without .yml)."""
    root = root or content_dir()
    return {p.stem: p for p in sorted((root / "playbooks").glob("*.yml"))}


def first_comment(path: Path) -> str:
    """A playbook's purpose: its first comment line."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def parse_extra_vars(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """KEY=VALUE pairs; VALUE is read as YAML when it is a boolean, a number or a flow list of scalars
    (``true``, ``4``, ``[1, "50%"]``), anything else is a string, as ``-e '{"KEY": VALUE}'`` would give
    it, so role variables typed bool, int or list take them."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not VARIABLE_NAME.match(key):
            raise InputError(f"--extra-vars {item.split('=')[0][:60]!r}: expected KEY=VALUE with KEY a variable "
                             "name (letters, digits, _)")
        if "{{" in value or "{%" in value:
            raise InputError(f"--extra-vars {key}: the value is a Jinja template; vgpu passes only literal values "
                             "(a template there would run on the controller when the play reads it)")
        try:
            scalar = yaml.safe_load(value) if len(value) < 256 else value
        except yaml.YAMLError:
            scalar = value
        plain = (bool, int, float, str)
        typed = isinstance(scalar, (bool, int, float)) or (
            isinstance(scalar, list) and len(scalar) <= 64 and all(isinstance(x, plain) for x in scalar))
        out[key] = scalar if typed and value.strip() == value else value
    return out


def redact(extra: dict[str, Any]) -> dict[str, Any]:
    return {k: (REDACTED if SECRET_NAME.search(k) else v) for k, v in extra.items()}


@dataclass
class HostResult:
    host: str
    status: str = "ok"  # ok | changed | failed | unreachable
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    task: str | None = None  # the task running now, then the failing one
    failed_task: str | None = None
    message: str | None = None
    provision_started: bool = False  # a vgpu_provision task started on it
    # an interrupted run only (vgpu.automation.interrupt): applied | rolled back | unknown | not started, and
    # what the host said when it was read back after the stop
    outcome: str | None = None
    read_back: dict[str, Any] | None = None
    diffs: list[dict[str, str]] = field(default_factory=list)  # --diff: {"task", "diff"} per task that has one

    def to_dict(self) -> dict[str, Any]:
        out = {"host": self.host, "status": self.status, "ok": self.ok, "changed": self.changed,
               "failed": self.failed, "unreachable": self.unreachable, "skipped": self.skipped,
               "failed_task": self.failed_task, "message": self.message}
        if self.outcome is not None:
            out.update(outcome=self.outcome, read_back=self.read_back)
        if self.diffs:
            out["diffs"] = list(self.diffs)
        return out


@dataclass
class RunResult:
    playbook: str
    inventory: str
    limit: str | None
    check: bool
    extra_vars: dict[str, Any]
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    rc: int
    hosts: list[HostResult] = field(default_factory=list)
    error: str | None = None  # a failure no host explains (a syntax error, no host matched)
    interrupted: int | None = None  # the signal that stopped the run
    artifacts: str | None = None  # where this run's artifacts were kept (vgpu.automation.artifacts)
    artifacts_problem: str | None = None  # why they could not be kept

    @property
    def exit_code(self) -> int:
        if self.interrupted is not None:
            return 128 + self.interrupted
        if any(h.status == "unreachable" for h in self.hosts):
            return ExitCode.REMOTE
        if any(h.status == "failed" for h in self.hosts):
            return ExitCode.APPLY_FAILED
        return ExitCode.OK if self.rc == 0 else ExitCode.FAILURE

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "playbook": self.playbook, "inventory": self.inventory, "limit": self.limit,
                "check": self.check, "extra_vars": redact(self.extra_vars), "status": self.status,
                "ansible_rc": self.rc, "exit_code": int(self.exit_code), "error": self.error,
                "hosts": [h.to_dict() for h in self.hosts], "artifacts": self.artifacts,
                **({"interrupted": signal.Signals(self.interrupted).name} if self.interrupted else {})}


class Tracker:
    """Turns runner events into per-host results; ``on_change(tracker)`` after each that matters."""

    def __init__(self, on_change: Callable[["Tracker"], None] | None = None):
        self.hosts: dict[str, HostResult] = {}
        self.task: str | None = None
        self.stats: dict[str, dict[str, int]] | None = None
        self.on_change = on_change
        self.lines: list[str] = []  # what ansible printed that no host explains (warnings, errors)

    def host(self, name: str) -> HostResult:
        return self.hosts.setdefault(name, HostResult(name))

    def __call__(self, event: dict) -> bool:
        kind, data = event.get("event", ""), event.get("event_data") or {}
        name = data.get("host")
        if kind == "playbook_on_task_start":
            self.task = data.get("task") or data.get("name")
        elif kind == "runner_on_start" and name:
            self.host(name).task = data.get("task")
            if str(data.get("task_action", "")).endswith("vgpu_provision"):
                self.host(name).provision_started = True
        elif kind in ("runner_on_ok", "runner_item_on_ok") and name and kind == "runner_on_ok":
            h = self.host(name)
            h.ok += 1
            res = data.get("res") or {}
            if res.get("changed"):
                h.changed += 1
            text = diff_text(res.get("diff"))
            if text:
                h.diffs.append({"task": str(data.get("task") or ""), "diff": text})
        elif kind == "runner_on_skipped" and name:
            self.host(name).skipped += 1
        elif kind == "runner_on_failed" and name and not data.get("ignore_errors"):
            h = self.host(name)
            h.failed += 1
            h.failed_task = data.get("task")
            h.message = _message(data.get("res") or {})
        elif kind == "runner_on_unreachable" and name:
            h = self.host(name)
            h.unreachable += 1
            h.failed_task = data.get("task")
            h.message = _message(data.get("res") or {})
        elif kind == "playbook_on_stats":
            self.stats = {k: dict(data.get(k) or {}) for k in ("ok", "changed", "failures", "dark", "skipped")}
        elif kind == "verbose" and event.get("stdout"):
            self.lines.append(str(event["stdout"]))
        else:
            return True
        if self.on_change is not None:
            self.on_change(self)
        return True

    def results(self) -> list[HostResult]:
        for h in self.hosts.values():
            h.status = ("unreachable" if h.unreachable else "failed" if h.failed else
                        "changed" if h.changed else "ok")
        return sorted(self.hosts.values(), key=lambda h: h.host)


def diff_text(diff: Any) -> str:
    """Ansible's diff of one task result as text: a module's ``prepared`` text, or a unified diff of ``before`` and
    ``after`` (with their headers), for each entry of a list."""
    import difflib

    parts = []
    for entry in diff if isinstance(diff, list) else [diff]:
        if not isinstance(entry, dict):
            continue
        if entry.get("prepared"):
            parts.append(str(entry["prepared"]).rstrip("\n"))
        elif "before" in entry or "after" in entry:
            before, after = str(entry.get("before") or ""), str(entry.get("after") or "")
            if before != after:
                parts.append("".join(difflib.unified_diff(
                    before.splitlines(True), after.splitlines(True),
                    fromfile=str(entry.get("before_header") or "before"),
                    tofile=str(entry.get("after_header") or "after"))).rstrip("\n"))
    return "\n".join(p for p in parts if p)[:20000]


def _message(res: dict) -> str:
    msg = res.get("msg") or res.get("stderr") or res.get("module_stderr") or ""
    if not msg and isinstance(res.get("results"), list):
        msg = next((r.get("msg", "") for r in res["results"] if isinstance(r, dict) and r.get("failed")), "")
    return " ".join(str(msg).split())[:2000]


@dataclass
class RunOptions:
    """How ansible-playbook runs beyond the play itself: verbosity (-v count), vault, and where a failed or
    interrupted run's artifacts are kept (``keep_always``: a successful run's too)."""
    verbosity: int = 0
    vault_password_file: Path | None = None
    vault_password: str | None = None  # --ask-vault-pass: answered at ansible-playbook's prompt, in memory only
    artifacts_dir: Path | None = None
    keep_always: bool = False

    def cmdline(self) -> list[str]:
        if self.vault_password_file is not None:
            return ["--vault-password-file", str(self.vault_password_file)]
        return ["--ask-vault-pass"] if self.vault_password is not None else []

    def passwords(self) -> dict[str, str] | None:
        return {r"^Vault password[^:]*:\s*$": self.vault_password} if self.vault_password is not None else None


def check_vault_file(path: Path) -> Path:
    """A vault password file: a regular file or an executable script as Ansible takes it; returned absolute
    (ansible-playbook runs in another directory's private data)."""
    path = Path(os.path.abspath(path))
    if not path.is_file():
        raise InputError(f"--vault-password-file {path}: no such regular file")
    if not os.access(path, os.R_OK):
        raise InputError(f"--vault-password-file {path}: not readable")
    return path


def run_playbook(name: str, inventory_path: Path, *, limit: str | None = None, extra_vars: dict[str, Any] | None = None,
                 check: bool = False, diff: bool = False, on_change: Callable[[Tracker], None] | None = None,
                 options: RunOptions | None = None) -> RunResult:
    """Run the shipped playbook ``name`` on the inventory; raises InputError before anything runs for an
    unknown playbook or a bad inventory, InterruptedRun (130/143/129) when SIGINT/SIGTERM/SIGHUP stopped the run.
    A failed or interrupted run keeps its artifacts (RunOptions.artifacts_dir) and says where (``artifacts``)."""
    from vgpu.automation import artifacts

    options = options or RunOptions()
    keep_in = artifacts.check_dir(options.artifacts_dir or artifacts.default_dir())
    root = content_dir()
    books = playbooks(root)
    if name.endswith(".yml"):
        name = name[:-4]
    if name not in books:
        raise InputError(f"no playbook {name!r}; shipped: {', '.join(books)}", hint="vgpu playbook list")
    inv = read_inventory(inventory_path, limit=limit)  # refused here, before ansible-playbook starts
    ansible_tool("ansible-playbook")
    import ansible_runner

    tracker = Tracker(on_change)
    stop = interrupt.StopOnSignal()
    with tempfile.TemporaryDirectory(prefix="vgpu-playbook-") as tmp, stop:
        pdd = Path(tmp)
        (pdd / "inventory").mkdir()
        staged = stage(inv.text, Path(inventory_path), pdd / "inventory")
        bin_dir = str(Path(sys.executable).parent)
        envvars = {
            "ANSIBLE_CONFIG": ansible_config(root),
            "ANSIBLE_COLLECTIONS_PATH": collections_path(root),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "ANSIBLE_NOCOLOR": "1",
        }
        import shlex

        flags = (["--check"] if check else []) + (["--diff"] if diff else []) + options.cmdline()
        runner = ansible_runner.run(private_data_dir=str(pdd), project_dir=working_dir(root), ident="run",
                                    playbook=str(books[name]), inventory=str(staged), limit=limit,
                                    extravars=dict(extra_vars or {}), envvars=envvars, quiet=True,
                                    cmdline=" ".join(map(shlex.quote, flags)) or None, event_handler=tracker,
                                    verbosity=options.verbosity or None, passwords=options.passwords(),
                                    cancel_callback=stop.requested, settings={"suppress_ansible_output": True})
        error = _runner_error(runner, tracker.lines) if runner.rc else None  # before its artifacts go
        stop.drain()
        result = RunResult(playbook=name, inventory=str(inventory_path), limit=limit, check=check,
                           extra_vars=dict(extra_vars or {}), status=str(runner.status), rc=int(runner.rc or 0),
                           hosts=_with_every_host(tracker.results(), inv, tracker.stats))
        if stop.signum is not None:
            _read_back(result, stop.signum, staged, envvars, dict(extra_vars or {}), pdd / "readback")
        if options.keep_always or stop.signum is not None or result.exit_code != ExitCode.OK:
            secrets = artifacts.secrets_of(result.extra_vars, SECRET_NAME, [options.vault_password or ""])
            summary = {**result.to_dict(), "error": result.error or error, "ansible_cmdline": flags}
            try:
                result.artifacts = str(artifacts.keep(pdd / "artifacts" / "run", keep_in, name, summary, secrets))
            except OSError as exc:  # a full or read-only disk must not hide the run's own result
                result.artifacts_problem = f"the run's artifacts could not be kept in {keep_in}: {exc.strerror}"
    if stop.signum is not None:
        raise _interrupted(result, stop)
    if result.rc != 0 and not any(h.status in ("failed", "unreachable") for h in result.hosts):
        result.error = error or f"ansible-playbook exited {result.rc}"
    return result


def working_dir(root: Path) -> str:
    """Where ansible-playbook runs (ansible-runner's project_dir is its working directory): the directory vgpu was
    started in, as when the operator runs ansible-playbook there, so the inventory's relative paths mean what
    vgpu validate --inventory reads (vgpu.automation.inventory.controller_path); the playbooks' directory when
    that one was removed. The playbook itself is given by its absolute path."""
    try:
        return os.getcwd()
    except OSError:
        return str(root / "playbooks")
def _read_back(result: RunResult, signum: int, staged: Path, envvars: dict, extra: dict, private: Path) -> None:
    """Each host's outcome after the stop, read back from the hosts where a provision task had started."""
    result.interrupted = signum
    started = [h.host for h in result.hosts if h.provision_started]
    private.mkdir()
    found = interrupt.read_back(started, inventory=staged, envvars=envvars, extravars=extra, private=private,
                                workdir=working_dir(content_dir()))
    for h in result.hosts:
        h.outcome, h.read_back = found.get(h.host, (interrupt.NOT_STARTED, None))


def _interrupted(result: RunResult, stop) -> InterruptedRun:
    got = signal.Signals(stop.signum).name
    how = ": passed on" if stop.sent == stop.signum else \
        f" (the terminal went away): passed on as {signal.Signals(stop.sent).name}"
    by = {}
    for h in result.hosts:
        by.setdefault(h.outcome, []).append(h.host)
    said = "; ".join(f"{what}: {', '.join(hosts[:8])}" + (" ..." if len(hosts) > 8 else "")
                     for what, hosts in by.items()) or "no host was reached"
    exc = InterruptedRun(f"interrupted by {got}{how} to ansible-playbook and the tasks it was running; read back "
                         f"from each host after the stop: {said}", stop.signum,
                         hint="the roles are idempotent: run again to finish" if by.get(interrupt.ROLLED_BACK) or
                         by.get(interrupt.NOT_STARTED) else None)
    exc.result = result
    return exc


def _with_every_host(results: list[HostResult], inv: Inventory, stats) -> list[HostResult]:
    """Hosts the play never reached (not matched by the playbook's hosts:) are left out; counts come from
    Ansible's final stats where it sent them."""
    if stats:
        for h in results:
            h.ok = stats["ok"].get(h.host, h.ok)
            h.changed = stats["changed"].get(h.host, h.changed)
            h.skipped = stats["skipped"].get(h.host, h.skipped)
            h.status = ("unreachable" if h.unreachable or stats["dark"].get(h.host) else
                        "failed" if h.failed or stats["failures"].get(h.host) else
                        "changed" if h.changed else "ok")
    return results


def _runner_error(runner, lines: list[str]) -> str:
    """Ansible's own reason for a run that failed before any host did (ERROR lines of its output)."""
    text = "\n".join(lines)
    try:
        text += "\n" + runner.stdout.read()
    except (OSError, AttributeError):
        pass
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("[ERROR]") or ln.startswith("ERROR!")]
    return " ".join((errors or lines[-1:]))[:600]
