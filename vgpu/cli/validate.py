"""`vgpu validate` (run the guest agent on many guests) and `vgpu report` (re-render or merge reports).

Exit codes (docs/exit-codes.md): 0 every guest passed; 1 a check failed or an agent broke;
9 a guest was unreachable, refused us, timed out or had an untrusted host key; 5 bad input.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import click

from vgpu.errors import InputError, UsageError
from vgpu.guest.agent.result import STATUSES

DEFAULT_SIM_GUESTS = 4
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")  # OpenSSH's, and the validate role's validate_known_hosts default
# One thread per guest in flight, each with a stack of its own (8 MiB by default on Linux): 256 keep within a
# few GB of address space and saturate any controller's SSH; more would only queue in sshd's MaxStartups.
MAX_CONCURRENCY = 256


class _ScenarioOption(click.Option):
    """--scenario, whose help lists the simulator's own scenario names (read when help is shown, so the list
    cannot drift from the simulator's list, vgpu.sim.scenarios, which imports nothing)."""

    def get_help_record(self, ctx):
        from vgpu.sim.scenarios import SCENARIOS
        base = (self.help or "").split(" (one of:")[0]
        self.help = f"{base} (one of: {', '.join(SCENARIOS)})."
        return super().get_help_record(ctx)


@click.command()
@click.option("--guests", "guests", metavar="FILE|N",
              help="Guests file (YAML, docs/validate.md); with --simulate: how many simulated guests [4].")
@click.option("--inventory", type=click.Path(path_type=Path), help="Ansible inventory (INI or YAML).")
@click.option("--limit", metavar="GROUPS|HOSTS", help="With --inventory: comma-separated groups or hosts.")
@click.option("--profile", help="Profile for guests that name neither a profile nor an expect block.")
@click.option("--report-dir", required=True, type=click.Path(path_type=Path),
              help="Where to write validation-report.{json,junit.xml,html}.")
@click.option("--concurrency", default=8, show_default=True, type=click.IntRange(1, MAX_CONCURRENCY),
              help=f"Guests validated at the same time (at most {MAX_CONCURRENCY}: one thread each).")
@click.option("--timeout", default=900.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds one agent run may take on a guest.")
@click.option("--connect-timeout", default=10.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds for TCP connect and the SSH greeting (authentication gets twice this).")
@click.option("--known-hosts", type=click.Path(path_type=Path), default=None,
              help="known_hosts file for strict host-key checking [default: with --inventory the guests' "
                   "validate_known_hosts, else ~/.ssh/known_hosts].")
@click.option("--accept-new-host-keys", is_flag=True,
              help="Trust and record keys of hosts missing from known_hosts (a changed key stays refused).")
@click.option("--identity", type=click.Path(path_type=Path),
              help="SSH private key for guests that name none (default: ssh-agent, then ~/.ssh keys).")
@click.option("--user", help="SSH user for guests that name none (default: the local user).")
@click.option("--simulate", is_flag=True, help="Validate simulated guests on this machine (no SSH, no GPU).")
@click.option("--replay-dir", type=click.Path(path_type=Path), help="With --simulate: captured tool outputs.")
@click.option("--scenario", "scenarios", cls=_ScenarioOption, default="healthy", show_default=True,
              metavar="NAME[,NAME...]", help="With --simulate: scenarios given to the simulated guests in turn")
@click.option("--skip-workloads", is_flag=True, help="Run only the inventory checks, not HIP/FP8 workloads.")
@click.option("--optional", "optional", multiple=True, metavar="CHECK",
              help="Let CHECK go unjudged when it cannot run (e.g. fp8.torch on an image without PyTorch); "
                   "reported as 'not judged', never as passed. Repeatable.")
@click.option("--quick", is_flag=True, help="About 2 s per GEMM instead of 10: a smoke run, not a sustained result.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary table.")
@click.pass_context
def validate(ctx: click.Context, guests, inventory, limit, profile, report_dir, concurrency, timeout,
             connect_timeout, known_hosts, accept_new_host_keys, identity, user, simulate, replay_dir,
             scenarios, skip_workloads, optional, quick, quiet) -> None:
    """Run the vgpu agent on guests over SSH (or on simulated guests) and write the reports."""
    from vgpu.guest.bundle import build_agent
    from vgpu.guest.fanout import run_fanout
    from vgpu.guest.report import check_report_dir, write_all
    from vgpu.guest.transport import Timeouts

    check_report_dir(report_dir)
    options = _check_options(optional, quick)
    timeouts = Timeouts(connect=connect_timeout, auth=2 * connect_timeout, run=timeout)
    with tempfile.TemporaryDirectory(prefix="vgpu-validate-") as tmp:
        if simulate:
            jobs, transport = _simulated(guests, inventory, profile, replay_dir, scenarios, skip_workloads,
                                         Path(tmp), options)
        else:
            jobs, transport = _remote(guests, inventory, limit, profile, known_hosts, accept_new_host_keys,
                                      identity, user, skip_workloads, options)
        agent = build_agent(Path(tmp) / "agent")
        _check_threads(min(concurrency, len(jobs)), concurrency)  # before any guest is contacted
        with _Progress(len(jobs), quiet) as progress, _thread_limit(concurrency):
            report = run_fanout(jobs, transport, agent, concurrency=concurrency, timeouts=timeouts,
                                on_start=progress.start, on_done=progress.done)
    paths = write_all(report, report_dir)
    if not quiet:
        _summary(report, paths)
    ctx.exit(report.exit_code)


def _too_many_threads(concurrency: int, started: int | None) -> InputError:
    could = f"only {started}" if started is not None else "not that many"
    return InputError(f"--concurrency {concurrency}: this process could start {could} threads (its "
                      "address-space limit, `ulimit -v`, or process limit, `ulimit -u`, is too low)",
                      hint="lower --concurrency, or raise those limits")


def _threads_that_fit() -> int | None:
    """How many more thread stacks fit in this process's address-space limit (`ulimit -v`), or None without one.
    Asked before any thread is started: with the limit nearly reached, a thread the kernel created can fail
    inside Python before it reports itself started, and Thread.start() then waits for ever."""
    import resource
    import threading

    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return None
    stack = threading.stack_size() or resource.getrlimit(resource.RLIMIT_STACK)[0]
    if stack in (0, resource.RLIM_INFINITY) or stack > 1 << 30:
        stack = 8 << 20  # glibc's default thread stack where the limit gives none
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            used = int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None
    room = int(limit * 0.9) - used  # a tenth kept for the fan-out's own work
    # glibc gives threads their own malloc arenas, each reserving 64 MiB of address space, up to 8 per CPU
    # (M_ARENA_MAX, or $MALLOC_ARENA_MAX): count them for the first threads, then the stacks alone.
    import os
    try:
        arenas = int(os.environ.get("MALLOC_ARENA_MAX") or 8 * (os.cpu_count() or 1))
    except ValueError:
        arenas = 8 * (os.cpu_count() or 1)
    arena = 64 << 20
    with_arenas = min(arenas, room // (stack + arena))
    return max(0, with_arenas + max(0, room - with_arenas * (stack + arena)) // stack)


def _check_threads(needed: int, concurrency: int) -> None:
    """Start the threads the fan-out will use, idle, and let them go: a limit too low for them (an
    address-space limit for their stacks, a process limit) is one line before any guest is contacted."""
    import threading

    fits = _threads_that_fit()
    if fits is not None and fits < needed:
        raise _too_many_threads(concurrency, fits)

    release, started = threading.Event(), []
    try:
        for _ in range(needed):
            thread = threading.Thread(target=release.wait, daemon=True)
            thread.start()
            started.append(thread)
    except RuntimeError as exc:
        if "can't start new thread" not in str(exc):
            raise
        raise _too_many_threads(concurrency, len(started)) from None
    finally:
        release.set()
        for thread in started:
            thread.join()


@contextlib.contextmanager
def _thread_limit(concurrency: int):
    """The same limit met later (another process of this user took the room): one line, not an internal
    error; the guests already started finish first."""
    try:
        yield
    except RuntimeError as exc:
        if "can't start new thread" not in str(exc):
            raise
        raise _too_many_threads(concurrency, None) from None


def _check_options(optional: tuple[str, ...], quick: bool):
    """The validation options; an --optional naming no check is a usage error (it would hide nothing)."""
    from vgpu.guest.agent.metrics import CHECKS
    from vgpu.guest.fanout import CheckOptions

    unknown = [c for c in optional if c not in CHECKS]
    if unknown:
        raise UsageError(f"--optional {unknown[0][:60]!r}: no such check; the checks: {', '.join(CHECKS)}")
    return CheckOptions(optional=tuple(optional), quick=quick)


def _remote(guests, inventory, limit, profile, known_hosts, accept_new, identity, user, skip_workloads, options):
    from dataclasses import replace

    from vgpu.guest.fanout import job_for
    from vgpu import inputs
    from vgpu.guest.transport import KnownHosts, SshTransport
    from vgpu.inputs import read_text

    if bool(guests) == bool(inventory):
        raise InputError("give exactly one of --guests FILE or --inventory FILE (or use --simulate)")
    if limit and not inventory:
        raise InputError("--limit applies to --inventory only")
    targets, named_known_hosts = _read_targets(Path(guests) if guests else None, inventory, limit)
    if identity is not None:
        identity = identity.expanduser()
        try:
            inputs.regular_file(identity, "identity file")
        except InputError as exc:
            raise InputError(str(exc), hint="give an SSH private key, or omit --identity to use ssh-agent") from None
    targets = [replace(t, endpoint=replace(t.endpoint, identity=t.endpoint.identity or identity,
                                           user=t.endpoint.user or user),
                       skip_workloads=t.skip_workloads or skip_workloads) for t in targets]
    jobs = [job_for(t, default_profile=profile, options=options) for t in targets]
    kh = (known_hosts or named_known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()
    if os.path.lexists(kh):
        read_text(kh, "known_hosts")  # a regular UTF-8 file within its cap, refused here before any guest
    return jobs, SshTransport(KnownHosts(kh, accept_new=accept_new))


def _read_targets(guests: Path | None, inventory: Path | None, limit: str | None):
    from vgpu.guest.targets import parse_guests_file, read_inventory_targets
    from vgpu.inputs import read_text

    if inventory:
        return read_inventory_targets(inventory, limit=limit)
    text = read_text(guests, "guests file")
    return parse_guests_file(text, source=str(guests), base_dir=guests.resolve().parent), None


def _simulated(count, inventory, profile, replay_dir, scenarios, skip_workloads, tmp: Path, options):
    from vgpu.guest.fanout import Job, build_for
    from vgpu.guest.targets import ExpectSpec
    from vgpu.guest.transport import LocalTransport
    from vgpu.sim.guests import SCENARIOS, SIM_TARGET, sim_guest_env

    if inventory:
        raise InputError("--simulate builds its own guests: drop --inventory")
    try:
        n = DEFAULT_SIM_GUESTS if count is None else int(count)
    except ValueError:
        raise InputError(f"with --simulate, --guests takes a number of guests, not {count!r}") from None
    if not 1 <= n <= 1024:
        raise InputError(f"--guests {n}: simulate between 1 and 1024 guests")
    if replay_dir is not None and not replay_dir.is_dir():
        raise InputError(f"--replay-dir {replay_dir} is not a directory")
    names = [s.strip() for s in scenarios.split(",") if s.strip()]
    unknown = [s for s in names if s not in SCENARIOS]
    if unknown or not names:
        bad = ", ".join(repr(s) for s in unknown) or repr(scenarios)
        raise InputError(f"unknown scenario {bad}; known: {', '.join(SCENARIOS)}")
    spec = None if profile else ExpectSpec(**SIM_TARGET)
    if spec is not None:  # say what the guests are judged against: nobody asked for it
        t = SIM_TARGET
        click.echo(f"note: no --profile: the simulated guests are judged as {t['model']} "
                   f"{t['compute']}/{t['memory']} {'VFs' if t['is_vf'] else 'whole GPUs'} (how they are simulated); "
                   "give --profile NAME to judge them as that profile's guests", err=True)
    jobs = []
    for i in range(n):
        name, scenario = f"sim-{i + 1:02d}", names[i % len(names)]
        expectation, summary = build_for(name, spec, profile, skip_workloads=skip_workloads, options=options)
        env = sim_guest_env(tmp / name, replay_dir=replay_dir, scenario=scenario)
        jobs.append(Job(name=name, address=f"local:{scenario}", endpoint=None, expectation=expectation,
                        summary=summary, env=env, skip_workloads=skip_workloads))
    return jobs, LocalTransport(base=tmp)


class _Progress:
    """A rich progress bar on stderr; silent when stderr is not a terminal or with --quiet."""

    def __init__(self, total: int, quiet: bool):
        self.enabled = not quiet and sys.stderr.isatty()
        self.total = total
        self._bar = None

    def __enter__(self) -> "_Progress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("validating"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("", total=self.total)
        return self

    def start(self, job) -> None:  # noqa: ANN001
        pass

    def done(self, guest) -> None:  # noqa: ANN001
        if self._bar is not None:
            from vgpu.cli.render import safe
            self._bar.update(self._task, advance=1, description=f"{safe(guest.name)}: {safe(guest.verdict)}")

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        if self._bar is not None:
            self._bar.stop()


def _summary(report, paths: dict[str, Path]) -> None:
    from vgpu.cli.render import add_row, cell, console, safe, table

    styles = {"pass": "green", "fail": "red", "error": "yellow"}
    rows = table("vgpu validate", ("guest", "verdict", "outcome", "p/f/s/e", "s", "detail"),
                 keep_whole=("verdict", "outcome", "p/f/s/e", "s"))
    for g in report.guests:
        counts = "/".join(str(sum(c.status == s for c in g.checks)) for s in STATUSES)
        failed = [c.name for c in g.checks if c.status in ("fail", "error")]
        more = f" (+{len(failed) - 3})" if len(failed) > 3 else ""
        detail = g.detail or (", ".join(failed[:3]) + more)
        add_row(rows, g.name, cell(g.verdict, styles.get(g.verdict)), g.outcome.value, counts, f"{g.seconds:.1f}",
                detail)
    out = console()
    out.print(rows)
    unjudged = report.not_judged()
    if unjudged:
        names = ", ".join(f"{i['guest']} {i['check']}" for i in unjudged[:5])
        more = f" (+{len(unjudged) - 5})" if len(unjudged) > 5 else ""
        out.print(f"not judged: {len(unjudged)} check(s): {safe(names)}{more}; the reports say why", highlight=False)
    for kind, path in paths.items():
        out.print(f"{kind} report: {safe(path)}", highlight=False)


@click.command()
@click.option("--from", "sources", multiple=True, type=click.Path(path_type=Path),
              help="A report JSON or a report directory; repeat to merge.")
@click.option("--compare", "compare_pair", nargs=2, type=click.Path(path_type=Path), default=None,
              metavar="BASELINE CURRENT", help="Compare two reports (JSON or report directories) guest by guest: "
                                                "deltas, regressions (exit 1), unpaired guests.")
@click.option("--threshold", "thresholds", multiple=True, metavar="CHECK-PREFIX=PERCENT",
              help="With --compare: the regression threshold for checks starting with the prefix (repeat; "
                   "defaults in docs/validate.md).")
@click.option("--report-dir", type=click.Path(path_type=Path), default=None,
              help="Where to write validation-report.{json,junit.xml,html} (with --compare: "
                   "comparison.{json,junit.xml,html}).")
@click.option("--quiet", "-q", is_flag=True)
@click.pass_context
def report(ctx: click.Context, sources: tuple[Path, ...], compare_pair, thresholds: tuple[str, ...],
           report_dir: Path | None, quiet: bool) -> None:
    """Re-render one report, merge several (a guest in several keeps its newest result), or compare two."""
    from vgpu import __version__
    from vgpu.guest.report import json as json_report
    from vgpu.guest.report import check_report_dir, write_all
    from vgpu.guest.report.model import merge

    if bool(sources) == bool(compare_pair):
        raise click.UsageError("give --from REPORT... (re-render or merge) or --compare BASELINE CURRENT")
    if compare_pair:
        ctx.exit(_compare(compare_pair, thresholds, report_dir, quiet))
    if thresholds:
        raise click.UsageError("--threshold only applies to --compare")
    if report_dir is None:
        raise click.UsageError("--from needs --report-dir")
    check_report_dir(report_dir)
    loaded = [json_report.load(p) for p in sources]
    if len(loaded) == 1:
        merged = loaded[0]
    else:
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        merged = merge(loaded, generated=now, vgpu_version=__version__)
    paths = write_all(merged, report_dir)
    if not quiet:
        _summary(merged, paths)
    ctx.exit(merged.exit_code)


def _compare(pair, thresholds: tuple[str, ...], report_dir: Path | None, quiet: bool) -> int:
    from vgpu.cli.render import add_row, cell, console, safe, table
    from vgpu.guest.report import check_report_dir, write_files
    from vgpu.guest.report import compare as cmp
    from vgpu.guest.report import json as json_report

    limits = cmp.parse_thresholds(thresholds)
    if report_dir is not None:
        check_report_dir(report_dir)
    baseline, current = (json_report.load(p) for p in pair)
    comp = cmp.compare(baseline, current, thresholds=limits, baseline_name=str(pair[0]), current_name=str(pair[1]))
    written = {}
    if report_dir is not None:
        report_dir.mkdir(parents=True, exist_ok=True)
        written = {"JSON": (report_dir / cmp.COMPARE_JSON, cmp.render_json(comp)),
                   "JUnit": (report_dir / cmp.COMPARE_JUNIT, cmp.render_junit(comp)),
                   "HTML": (report_dir / cmp.COMPARE_HTML, cmp.render_html(comp))}
        write_files(report_dir, dict(written.values()))
    if not quiet:
        rows = table(f"{pair[0]} -> {pair[1]}", ("guest", "check", "what", "baseline", "current", "unit", "change",
                                                  "verdict"))
        styles = {"regressed": "bold red", "improved": "green"}
        for d in comp.deltas:
            if d.verdict == "same":
                continue
            change = "" if d.relative is None else f"{d.relative:+.1f}%"
            unit = d.unit or "-"  # a status has none
            add_row(rows, d.guest, d.check, d.what, str(d.baseline), str(d.current), unit, change,
                    cell(d.verdict, styles.get(d.verdict)))
        out = console()
        out.print(rows)
        for kind, (path, _) in written.items():  # as `report --from` and `validate` say where they wrote
            out.print(f"{kind} comparison: {safe(path)}", highlight=False)
        for g in comp.only_baseline:
            out.print(f"[yellow]unpaired[/]: {safe(g)} is only in the baseline")
        for g in comp.only_current:
            out.print(f"[yellow]unpaired[/]: {safe(g)} is only in the current report")
        verdict = (f"[bold red]{len(comp.regressions)} regression(s)[/]" if comp.regressions
                   else "[green]no regression[/]")
        out.print(f"{verdict} across {len({d.guest for d in comp.deltas})} paired guest(s)")
    return comp.exit_code
