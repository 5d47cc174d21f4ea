"""What one batch of a wave runs: the collection's playbooks through ansible-runner (vgpu.automation.playbooks).

Each phase is one playbook run over the batch's hosts or their guests (``--limit``), in one Ansible batch in which
every target is attempted (``vgpu_serial`` = all of them, ``vgpu_max_fail_percentage`` 100): the roll-out, not
Ansible, decides what a failure stops. Each run's per-host result is kept beside the wave's reports.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from vgpu.errors import InterruptedRun
from vgpu.rollout.state import Spec

Note = Callable[[str], None]


class Actions(Protocol):
    def provision(self, hosts: list[str], out: Path, note: Note) -> dict[str, str | None]:
        """host -> None (provisioned) or why not."""

    def guest_stack(self, guests: list[str], out: Path, note: Note) -> dict[str, str | None]:
        """guest -> None (installed) or why not."""

    def validate(self, guests: list[str], out: Path, note: Note) -> tuple[Any, str | None]:
        """The validation report of ``guests`` (None when none was written) and the run's error, if any."""


class PlaybookActions:
    def __init__(self, spec: Spec):
        self.spec = spec

    def _run(self, name: str, targets: list[str], extra: dict[str, Any], out: Path, note: Note):
        from vgpu.automation.playbooks import RunOptions, run_playbook

        def on_change(tracker) -> None:
            note(f"{name} task: {tracker.task or 'starting'}")

        batch = {"vgpu_serial": [len(targets)], "vgpu_max_fail_percentage": 100}
        try:
            result = run_playbook(name, Path(self.spec.inventory), limit=",".join(targets),
                                  extra_vars={**self.spec.extra_vars, **batch, **extra}, on_change=on_change,
                                  options=RunOptions(artifacts_dir=out / "ansible-artifacts"))  # beside its JSON
        except InterruptedRun as exc:  # what the hosts said after the stop is kept as the run's result too
            if exc.result is not None:
                self._keep(out, name, exc.result)
            raise
        self._keep(out, name, result)
        return result

    @staticmethod
    def _keep(out: Path, name: str, result) -> None:
        from vgpu.fsutil import atomic_write

        out.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(out / f"{name}.json", json.dumps(result.to_dict(), indent=2) + "\n", 0o600)

    @staticmethod
    def _per_target(result, targets: list[str], what: str) -> dict[str, str | None]:
        seen = {h.host: h for h in result.hosts}
        out: dict[str, str | None] = {}
        for t in targets:
            h = seen.get(t)
            if h is not None and h.status in ("failed", "unreachable"):
                out[t] = f"{what}: {h.status} at {h.failed_task or 'a task'}: {h.message or ''}".strip()
            elif h is not None:
                out[t] = None
            elif result.error:
                out[t] = f"{what}: {result.error}"
            else:  # Ansible never reached it: its hosts pattern does not match, or the play ended first
                out[t] = f"{what}: the play did not run on it ({result.status}; check the play's hosts pattern)"
        return out

    def provision(self, hosts, out, note):
        result = self._run("provision", hosts, {"provision_profile": self.spec.profile,
                                                "vgpu_provision_hosts": self.spec.hosts_pattern}, out, note)
        return self._per_target(result, hosts, "provision")

    def guest_stack(self, guests, out, note):
        result = self._run("install_guest_stack", guests, {"vgpu_guests": self.spec.guests_pattern}, out, note)
        return self._per_target(result, guests, "guest stack")

    def validate(self, guests, out, note):
        from vgpu.fsutil import absolute
        from vgpu.guest.report import JSON_NAME
        from vgpu.guest.report import json as json_report

        report_dir = out / "validate"  # given to the play absolute: its file lookups do not start from here
        (report_dir / JSON_NAME).unlink(missing_ok=True)  # a report left by an earlier attempt is not this run's
        result = self._run("validate", guests, {
            "vgpu_guests": self.spec.guests_pattern, "validate_report_dir": str(absolute(report_dir)),
            "validate_profile": self.spec.guest_profile or self.spec.profile}, out, note)
        if not (report_dir / JSON_NAME).exists():
            failed = [h for h in result.hosts if h.status in ("failed", "unreachable")]
            why = result.error or (failed[0].message if failed else None) or "the validate play wrote no report"
            return None, why
        return json_report.load(report_dir), None
