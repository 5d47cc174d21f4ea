"""Run the guest agent on many guests at once and collect one typed result per guest.

Per guest (named steps, each failure typed): open a session -> make a private 0700 directory ->
upload the agent zipapp and the expectation -> run the agent -> parse its one JSON document ->
remove the directory. Over SSH the four middle steps are one command (``run_in_private_dir``); the
agent and the expectations are read once per run and the same bytes sent to every guest. A guest that is unreachable, refuses us, hangs or prints garbage becomes
its own ``GuestReport``; the others carry on (bounded ThreadPoolExecutor).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Protocol

from vgpu import __version__
from vgpu.errors import InputError
from vgpu.guest.agent.result import AgentResult
from vgpu.guest.report.model import Expectation, GuestReport, Outcome, ValidationReport
from vgpu.guest.targets import ExpectSpec, Target
from vgpu.guest.transport import WORKDIR, Endpoint, RunResult, Session, Timeouts, TransportFailure
from vgpu.inputs import LIMITS, InputFileError, MiB, parse_json

AGENT_NAME = "vgpu-agent.pyz"
DEFAULT_TIMEOUTS = Timeouts()
EXPECT_NAME = "expect.json"


class Transport(Protocol):
    def open(self, endpoint: Endpoint | None, timeouts: Timeouts) -> Session: ...


@dataclass(frozen=True)
class Job:
    """One guest to validate, with its expectation already built (bad input fails before any I/O)."""

    name: str
    address: str
    endpoint: Endpoint | None
    expectation: dict
    summary: Expectation
    env: dict[str, str] = field(default_factory=dict)
    python: str = "python3"
    skip_workloads: bool = False


@dataclass(frozen=True)
class CheckOptions:
    """The operator's validation options (``vgpu validate --optional CHECK --quick``)."""

    optional: tuple[str, ...] = ()
    quick: bool = False


def job_for(target: Target, *, default_profile: str | None = None, options: CheckOptions = CheckOptions()) -> Job:
    """The Job for a target. Raises InputError when no expectation can be built for it."""
    expectation, summary = build_for(target.name, target.expect, target.profile or default_profile,
                                     skip_workloads=target.skip_workloads, options=options)
    ep = target.endpoint
    return Job(name=target.name, address=ep.address, endpoint=ep, expectation=expectation,
               summary=summary, env=dict(target.env), python=target.python,
               skip_workloads=target.skip_workloads)


def build_for(name: str, spec: ExpectSpec | None, profile: str | None, *,
              skip_workloads: bool = False, options: CheckOptions = CheckOptions()) -> tuple[dict, Expectation]:
    """The agent expectation from an explicit spec, else from a profile. Raises InputError."""
    from vgpu.guest.expect import build_expectation

    extra: dict = {}
    used = None
    if spec is None and profile:
        spec, extra = _from_profile(profile)
        used = profile
    if spec is None:
        raise InputError(f"guest {name}: nothing to validate against",
                         hint="give --profile, a per-guest profile, or an expect block (model, partitions)")
    optional = dict(extra.pop("optional", None) or {})
    optional.update({check: "vgpu validate --optional" for check in options.optional})
    try:
        exp = build_expectation(spec.model, compute=spec.compute, memory=spec.memory, is_vf=spec.is_vf,
                                workloads=not skip_workloads, optional=optional, quick=options.quick, **extra)
    except InputError as exc:
        raise InputError(f"guest {name}: {exc.message}", hint=exc.hint) from None
    summary = Expectation(model=exp.get("model"), compute=exp.get("compute_partition"),
                          memory=exp.get("memory_partition"), is_vf=spec.is_vf,
                          profile=used)
    return exp, summary


def _from_profile(ref: str) -> tuple[ExpectSpec, dict]:
    """What a guest of this profile should see: the profile's model and partitions, a VF unless the
    profile passes whole GPUs through, its ROCm and driver versions and its threshold overrides."""
    from vgpu.catalog import Mode
    from vgpu.profiles import load_profile

    p = load_profile(ref)
    gpu = p.gpu
    spec = ExpectSpec(model=gpu.model, compute=gpu.compute_partition.value if gpu.compute_partition else None,
                      memory=gpu.memory_partition.value if gpu.memory_partition else None,
                      is_vf=gpu.mode is not Mode.PASSTHROUGH)
    extra = {"overrides": p.validation.threshold_overrides() or None, "rocm": _release(p.guest.rocm),
             "driver": _release(p.guest.amdgpu_driver), "optional": p.validation.optional_checks(p.name)}
    return spec, extra


def _release(version: str) -> str:
    """"30.10.x" means any patch release: the agent compares the dotted prefix."""
    return version[:-2] if version.endswith(".x") else version


# ---------------------------------------------------------------- one guest


class _AgentOutputError(Exception):
    pass


def validate_one(job: Job, transport: Transport, agent: Path, expect_file: Path,
                 timeouts: Timeouts, payloads: dict[Path, bytes] | None = None) -> GuestReport:
    """Validate one guest; never raises for anything the guest does."""
    t0 = time.monotonic()
    report = GuestReport(name=job.name, address=job.address, outcome=Outcome.OK, expectation=job.summary)
    try:
        session = transport.open(job.endpoint, timeouts)
    except TransportFailure as exc:
        return _finish(report, t0, exc.outcome, exc.detail)
    try:
        report.agent = _run_agent(session, job, agent, expect_file, timeouts, payloads)
    except TransportFailure as exc:
        _finish(report, t0, exc.outcome, exc.detail)
    except _AgentOutputError as exc:
        _finish(report, t0, Outcome.AGENT_ERROR, str(exc))
    finally:
        session.close()
    return _finish(report, t0, report.outcome, report.detail)


def _finish(report: GuestReport, t0: float, outcome: Outcome, detail: str) -> GuestReport:
    report.outcome, report.detail, report.seconds = outcome, detail, time.monotonic() - t0
    return report


def _run_agent(session: Session, job: Job, agent: Path, expect_file: Path, timeouts: Timeouts,
               payloads: dict[Path, bytes] | None = None) -> AgentResult:
    staged = getattr(session, "run_in_private_dir", None)
    if staged is not None:  # one exec carrying the files (SSH): see SshSession.run_in_private_dir
        def data(path: Path) -> bytes:
            return payloads[path] if payloads and path in payloads else Path(path).read_bytes()

        files = [(AGENT_NAME, data(agent)), (EXPECT_NAME, data(expect_file))]
        result = staged(files, _agent_argv(job, WORKDIR), env=job.env, timeout=timeouts.run)
        return parse_agent_output(result)
    workdir = session.make_private_dir()
    try:
        session.upload(agent, f"{workdir}/{AGENT_NAME}")
        session.upload(expect_file, f"{workdir}/{EXPECT_NAME}")
        result = session.run(_agent_argv(job, workdir), env=job.env, timeout=timeouts.run)
    finally:
        session.remove_dir(workdir)
    return parse_agent_output(result)


def _agent_argv(job: Job, workdir: str) -> list[str]:
    argv = [job.python, f"{workdir}/{AGENT_NAME}", "--expect", f"{workdir}/{EXPECT_NAME}", "--workdir", workdir]
    if job.skip_workloads:
        argv.append("--skip-workloads")
    return argv


def parse_agent_output(result: RunResult) -> AgentResult:
    """The agent's one JSON document. Raises _AgentOutputError describing what came instead."""
    text = result.stdout.decode("utf-8", errors="replace").strip()
    stderr = _excerpt(result.stderr.decode("utf-8", errors="replace").strip().splitlines()[-1:] or [""])
    if not text:
        raise _AgentOutputError(f"agent printed nothing (exit {result.returncode}); stderr: {stderr}")
    if len(result.stdout) > LIMITS["agent output"]:
        raise _AgentOutputError(f"agent printed more than the limit of {LIMITS['agent output'] // MiB} MiB "
                                f"(exit {result.returncode}); stdout began {_excerpt([text])}")
    try:
        data = parse_json(text, "agent output", "from this guest")  # nesting bounded
    except InputFileError as exc:
        no_json = exc.problem.startswith("is not valid JSON")
        raise _AgentOutputError((f"agent printed no JSON result (exit {result.returncode}); stdout began "
                                 f"{_excerpt([text])}; stderr: {stderr}") if no_json else
                                f"agent result {exc.problem} (exit {result.returncode})") from None
    try:
        agent = AgentResult.from_dict(data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _AgentOutputError(f"agent result is malformed (exit {result.returncode}): {exc}") from None
    if not agent.checks:
        raise _AgentOutputError("agent reported no checks")
    return agent


def _excerpt(lines: list[str], limit: int = 160) -> str:
    s = lines[0] if lines else ""
    s = "".join(ch if ch.isprintable() else "?" for ch in s[:limit])
    return repr(s + ("..." if len(lines[0]) > limit else "")) if lines else "''"


# ---------------------------------------------------------------- many guests


def run_fanout(jobs: list[Job], transport: Transport, agent: Path, *, concurrency: int = 8,
               timeouts: Timeouts = DEFAULT_TIMEOUTS, on_start: Callable[[Job], None] | None = None,
               on_done: Callable[[GuestReport], None] | None = None) -> ValidationReport:
    """Validate every job with at most ``concurrency`` guests in flight; results in job order."""
    if concurrency < 1:
        raise InputError(f"--concurrency must be at least 1, got {concurrency}")
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with tempfile.TemporaryDirectory(prefix="vgpu-expect-") as tmp:
        files = _expect_files(jobs, Path(tmp))
        # what every guest is sent, read once for the whole run (a fleet shares one agent and a
        # handful of expectations)
        payloads = {path: path.read_bytes() for path in {Path(agent), *files}}
        results: dict[int, GuestReport] = {}
        with ThreadPoolExecutor(max_workers=min(concurrency, max(1, len(jobs)))) as pool:
            futures = {pool.submit(_guarded, job, transport, agent, files[i], timeouts, on_start, payloads): i
                       for i, job in enumerate(jobs)}
            for fut in as_completed(futures):
                rep = fut.result()
                results[futures[fut]] = rep
                if on_done:
                    on_done(rep)
    return ValidationReport(generated=generated, vgpu_version=__version__,
                            guests=[results[i] for i in range(len(jobs))])


def _guarded(job: Job, transport: Transport, agent: Path, expect_file: Path, timeouts: Timeouts,
             on_start: Callable[[Job], None] | None, payloads: dict[Path, bytes] | None = None) -> GuestReport:
    """A bug on one guest's path must not take the others down: report it on that guest."""
    if on_start:
        on_start(job)
    t0 = time.monotonic()
    try:
        return validate_one(job, transport, agent, expect_file, timeouts, payloads)
    except Exception as exc:  # noqa: BLE001 (deliberate: isolate guests from each other)
        rep = GuestReport(name=job.name, address=job.address, outcome=Outcome.AGENT_ERROR,
                          expectation=job.summary)
        return _finish(rep, t0, Outcome.AGENT_ERROR, f"vgpu internal error: {type(exc).__name__}: {exc}")


def _expect_files(jobs: list[Job], tmp: Path) -> list[Path]:
    """One 0600 file per distinct expectation (most fleets share a handful)."""
    by_text: dict[str, Path] = {}
    out = []
    for job in jobs:
        text = json.dumps(job.expectation, indent=1, sort_keys=True)
        if text not in by_text:
            path = tmp / f"expect-{len(by_text)}.json"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            by_text[text] = path
        out.append(by_text[text])
    return out
