#!/usr/bin/python
# Copyright: vgpu maintainers
# Apache-2.0 (see the repository's LICENSE)
"""Ansible's contract for `vgpu provision` / `vgpu release`: check mode = plan, typed results."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vgpu_provision
short_description: Apply a vgpu profile to a KVM host (or release it) and return vgpu's typed result
version_added: "0.1.0"
description:
  - Runs C(vgpu provision --profile NAME --json --yes) on the target (C(vgpu release --json --yes) with
    O(state=released)) and returns the C(vgpu.provision/v1) document vgpu prints (docs/plan-json.md).
  - Check mode runs the same command with C(--dry-run), which prints the plan and changes nothing.
    C(changed) is true only when vgpu ran steps (in check mode, when the plan has steps).
  - With C(--diff) the plan's steps are shown as the diff.
  - A refusal, a device in use, a held lock or a failed step fails the task with vgpu's own sentences and
    its exit code (RV(rc), RV(exit_code_name)); a failed step has already been rolled back by vgpu.
  - vgpu is run with an argument list, never through a shell, in a session of its own, and the module waits for
    it whatever happens to the task. SIGINT, SIGTERM or SIGHUP to the module (an AWX cancel, ansible-playbook or
    C(vgpu playbook run) stopped) and the controller going away (the connection carrying the module's output
    closes, as when an SSH session drops or the Ansible worker is killed) are passed on to vgpu as SIGTERM, on which vgpu
    finishes its step and rolls back what it applied, unless its run was already verified (docs/ansible.md,
    "Interrupted runs"). The host ends applied or as it was, never half.
options:
  profile:
    description:
      - A shipped profile name (C(vgpu profiles list)) or the path of a profile YAML file on the target.
      - Required with O(state=provisioned).
    type: str
  state:
    description:
      - V(provisioned) applies O(profile); V(released) returns the host to its default state.
    type: str
    choices: [provisioned, released]
    default: provisioned
  force:
    description:
      - Proceed even when VMs or processes hold devices the plan disrupts (vgpu's C(--force)); they break.
    type: bool
    default: false
  lock_timeout:
    description: Seconds to wait for another vgpu run's host lock.
    type: float
    default: 30.0
  vf_timeout:
    description: Seconds to wait for gim to create the VFs after a reload.
    type: float
    default: 60.0
  simulate:
    description:
      - Run against vgpu's simulated host instead of this host's hardware (C(--simulate)); for demos and tests.
    type: bool
    default: false
  sim_machine:
    description: With O(simulate), the simulated machine (C(vgpu sim machines)); vgpu's default when omitted.
    type: str
  sim_dir:
    description: With O(simulate), the simulator directory (C(--sim-dir)).
    type: path
  executable:
    description: The vgpu command (a name looked up on PATH, or a path).
    type: str
    default: vgpu
attributes:
  check_mode:
    description: Runs vgpu with C(--dry-run) and returns the plan; nothing on the host changes.
    support: full
  diff_mode:
    description: Shows the plan's steps, one line each.
    support: full
author:
  - vgpu maintainers (@vgpu)
"""

EXAMPLES = r"""
- name: Split every MI300X into 4 VFs
  vgpu.instinct.vgpu_provision:
    profile: mi300x-4vf
  become: true

- name: What would change (check mode is the plan)
  vgpu.instinct.vgpu_provision:
    profile: mi300x-4vf
  check_mode: true
  diff: true

- name: Give the host back
  vgpu.instinct.vgpu_provision:
    state: released
  become: true
"""

RETURN = r"""
result:
  description: The whole C(vgpu.provision/v1) document (docs/plan-json.md).
  returned: when vgpu printed one
  type: dict
outcome:
  description:
    - How the run ended (V(applied), V(in-sync), V(planned), V(refused), V(failed), V(nothing-recorded),
      V(pending)).
    - V(pending) is applied as far as it could go; the task then fails naming what must happen first, such as
      shutting down a running VM of the assignment.
  returned: when vgpu printed a document
  type: str
  sample: applied
plan:
  description: The C(vgpu.plan/v1) plan that was applied or, in check mode, would be.
  returned: when vgpu planned
  type: dict
applied:
  description: One sentence per step applied, in order.
  returned: always
  type: list
  elements: str
problems:
  description: Why the profile was refused, one C({subject, message, fix}) per problem.
  returned: when refused
  type: list
  elements: dict
exit_code:
  description:
    - vgpu's exit code (docs/exit-codes.md); 3 in check mode when the plan has steps.
    - A failed task also carries it as RV(rc). It is not RV(rc) on success, because Ansible takes any non-zero
      RV(rc) for a failure and check mode's 3 is not one.
  returned: always
  type: int
rc:
  description: vgpu's exit code, on failure only.
  returned: failed
  type: int
exit_code_name:
  description: The exit code's name (V(OK), V(REFUSED), V(IN_USE), V(LOCKED), V(APPLY_FAILED), ...).
  returned: always
  type: str
cmd:
  description: The argument list that was run.
  returned: always
  type: list
  elements: str
"""

import json
import os
import select
import signal
import subprocess

from ansible.module_utils.basic import AnsibleModule

# vgpu's exit codes (docs/exit-codes.md; vgpu.errors.ExitCode).
EXIT_CODES = {0: "OK", 1: "FAILURE", 2: "USAGE", 3: "CHANGES_PENDING", 4: "REFUSED", 5: "BAD_INPUT",
              6: "IN_USE", 7: "LOCKED", 8: "APPLY_FAILED", 9: "REMOTE", 70: "INTERNAL", 129: "HANGUP",
              130: "INTERRUPTED", 143: "TERMINATED"}
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SCHEMA = "vgpu.provision/v1"


def command(module, executable):
    p = module.params
    if p["state"] == "provisioned":
        # --opt=VALUE: a value that starts with "-" stays a value, never becomes an option
        argv = [executable, "provision", f"--profile={p['profile']}"]
    else:
        argv = [executable, "release"]
    argv += ["--json", "--yes", "--lock-timeout", str(p["lock_timeout"])]
    if p["state"] == "provisioned":
        argv += ["--vf-timeout", str(p["vf_timeout"])]
    if p["force"]:
        argv.append("--force")
    if module.check_mode:
        argv.append("--dry-run")
    if p["simulate"]:
        argv.append("--simulate" + (f"={p['sim_machine']}" if p["sim_machine"] else ""))
        if p["sim_dir"]:
            argv.append(f"--sim-dir={p['sim_dir']}")
    return argv


def supervise(argv):
    """Run vgpu to its end: (rc, stdout, stderr). A stop of this module, or its controller going away, becomes one
    SIGTERM to vgpu (it rolls back), never the end of the module before vgpu has finished: a module killed mid-run
    would leave nobody waiting for the host to become consistent, and its process group's SIGKILL (ansible-runner
    after its grace period) does not reach vgpu, which runs in a session of its own."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, NO_COLOR="1"), start_new_session=True, close_fds=True)
    told = []

    def stop(_signum=None, _frame=None):
        if not told:
            told.append(True)
            try:
                proc.send_signal(signal.SIGTERM)
            except OSError:
                pass
    previous = {s: signal.signal(s, stop) for s in STOPS if signal.getsignal(s) != signal.SIG_IGN}
    try:
        out = _collect(proc, stop)
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
    return proc.wait(), out[0].decode(errors="replace"), out[1].decode(errors="replace")


def _collect(proc, stop):
    """vgpu's stdout and stderr until both close; ``stop()`` when this module's own stdout reports an error or a
    hang-up (poll gives POLLERR for a pipe whose reader is gone, POLLHUP for a closed socket or terminal)."""
    streams = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    poller = select.poll()
    for fd in streams:
        poller.register(fd, select.POLLIN)
    poller.register(1, 0)  # no events asked: only errors and hang-ups, which poll always reports
    open_fds = set(streams)
    while open_fds:
        for fd, events in poller.poll():
            if fd == 1:
                poller.unregister(1)
                if events & (select.POLLERR | select.POLLHUP):
                    stop()
                continue
            data = os.read(fd, 65536)
            if data:
                streams[fd].append(data)
            else:
                poller.unregister(fd)
                open_fds.discard(fd)
    return [b"".join(streams[proc.stdout.fileno()]), b"".join(streams[proc.stderr.fileno()])]


def document(stdout):
    try:
        doc = json.loads(stdout)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and doc.get("schema") == SCHEMA else None


def error_line(stderr):
    """vgpu's one `error:` line (and its `hint:`), for runs that printed no document (usage errors)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    picked = [ln for ln in lines if ln.startswith(("error:", "hint:", "Error:"))]
    return "; ".join(picked or lines[-3:]) or "no output"


def plan_text(plan):
    head = f"vgpu {plan.get('action', 'apply')}: {plan.get('profile')} on {plan.get('host')}"
    lines = [head] + [f"  {i}. {s.get('description', s.get('kind'))}" for i, s in enumerate(plan.get("steps", []), 1)]
    return "\n".join(lines) + "\n"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            profile=dict(type="str"),
            state=dict(type="str", choices=["provisioned", "released"], default="provisioned"),
            force=dict(type="bool", default=False),
            lock_timeout=dict(type="float", default=30.0),
            vf_timeout=dict(type="float", default=60.0),
            simulate=dict(type="bool", default=False),
            sim_machine=dict(type="str"),
            sim_dir=dict(type="path"),
            executable=dict(type="str", default="vgpu"),
        ),
        required_if=[("state", "provisioned", ("profile",))],
        supports_check_mode=True,
    )
    p = module.params
    if (p["sim_machine"] or p["sim_dir"]) and not p["simulate"]:
        module.fail_json(msg="sim_machine and sim_dir apply only with simulate: true")
    executable = p["executable"]
    if "/" not in executable:
        executable = module.get_bin_path(executable, required=True)
    argv = command(module, executable)
    rc, stdout, stderr = supervise(argv)
    name = EXIT_CODES.get(rc, f"EXIT_{rc}")
    doc = document(stdout)
    out = dict(cmd=argv, exit_code=rc, exit_code_name=name, changed=False, applied=[])
    if doc is None:
        module.fail_json(msg=f"vgpu exited {rc} ({name}) without a result: {error_line(stderr)}", stderr=stderr,
                         rc=rc, **out)
    plan = doc.get("plan")
    out.update(result=doc, outcome=doc.get("result"), applied=doc.get("applied") or [],
               problems=doc.get("problems"))
    if plan is not None:
        out["plan"] = plan
    for warning in doc.get("warnings") or []:
        module.warn(f"vgpu: {warning}")
    outcome = doc.get("result")
    if outcome == "refused":
        lines = [f"{pr['subject']}: {pr['message']}" + (f" (fix: {pr['fix']})" if pr.get("fix") else "")
                 for pr in doc.get("problems") or []]
        module.fail_json(msg=f"vgpu refused profile {doc.get('profile')} on {doc.get('host')}; nothing was "
                             f"changed: " + "; ".join(lines), rc=rc, **out)
    if outcome == "failed":
        err = doc.get("error") or {}
        hint = f" (hint: {err['hint']})" if err.get("hint") else ""
        module.fail_json(msg=f"vgpu exited {rc} ({name}): {err.get('message', error_line(stderr))}{hint}", rc=rc,
                         **out)
    if outcome == "pending" and rc == 3:  # applied and verified as far as it could go; the host does not match yet
        what = "; ".join((plan or {}).get("pending") or []) or error_line(stderr)
        module.fail_json(msg=f"vgpu applied what it could, but the host matches profile {doc.get('profile')} only "
                             f"after this is done outside vgpu: {what}", rc=rc, **out)
    expected = {"applied": 0, "in-sync": 0, "nothing-recorded": 0, "planned": 3}
    if expected.get(outcome) != rc:
        module.fail_json(msg=f"vgpu exited {rc} ({name}) with result {outcome!r}: {error_line(stderr)}", rc=rc,
                         **out)
    out["changed"] = bool(doc.get("changed")) if not module.check_mode else bool(plan and plan.get("steps"))
    if module._diff and plan is not None and plan.get("steps"):
        out["diff"] = {"prepared": plan_text(plan)}
    module.exit_json(**out)


if __name__ == "__main__":
    main()
