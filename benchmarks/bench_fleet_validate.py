#!/usr/bin/env python3
"""Benchmark: the `vgpu validate` controller's own cost per guest at fleet sizes (256, 1,000 guests).

One real sshd on 127.0.0.1 plays every guest (distinct guest names, the same address), with strict
host-key checking against a known_hosts file padded with one hashed line per guest (a fleet's
known_hosts, as `ssh-keyscan -H` writes it). The agents' own work is factored out: each guest's
``python`` is a stand-in that checks the uploaded agent and expectation are there (non-empty) and prints a
real agent result recorded once from a simulated healthy guest (full checks, workloads included). So
the controller does everything it does on a real fleet (connect, key exchange, host-key check,
authentication, upload, exec, collect, parse, report) while a guest costs sshd and one `cat`.
The guests share this machine's two cores with the controller, so their side is kept small too: sshd
sets SHLVL=1 for its sessions, which makes bash skip ~/.bashrc for commands over SSH (root's
~/.bashrc here runs `pyenv init`, ~0.1 s of CPU per command; ``--guest-shell-rc`` keeps it).

Measured per run of ``python -m vgpu validate --quiet`` as a whole process (start-up included): wall
time, CPU of the controller (user+sys of vgpu and anything it waited for, via wait4), and its peak
RSS (ru_maxrss of that process). ``--ansible N`` adds `ansible -m script` with the same stand-in on
N guests (OpenSSH, ControlPersist, forks = concurrency), interleaved with vgpu.

    .venv/bin/python benchmarks/bench_fleet_validate.py --guests 256,1000 --concurrency 32 \\
        --ansible 64 --repeat 3 [--repo DIR] [--record]

``--repo DIR`` runs another checkout's vgpu (e.g. ``git archive`` of an older commit), for before/after.
``--record`` appends one JSON line per size and tool to benchmarks/results/fleet_validate.jsonl.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import base64
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import report  # noqa: E402
from validate_fanout import keygen, start_sshd  # noqa: E402

from vgpu.guest.bundle import build_agent  # noqa: E402
from vgpu.guest.expect import build_expectation  # noqa: E402
from vgpu.sim.guests import SIM_TARGET, sim_guest_env  # noqa: E402

EXPECT = {"model": SIM_TARGET["model"], "compute": SIM_TARGET["compute"], "memory": SIM_TARGET["memory"],
          "vf": SIM_TARGET["is_vf"]}


def record_result(d: Path) -> Path:
    """One real agent result: the production agent on a simulated healthy guest, workloads included."""
    agent = build_agent(d / "agent")
    exp = d / "expect.json"
    exp.write_text(json.dumps(build_expectation(SIM_TARGET["model"], compute=SIM_TARGET["compute"],
                                                memory=SIM_TARGET["memory"], is_vf=SIM_TARGET["is_vf"])))
    env = {**os.environ, **sim_guest_env(d / "sim", scenario="healthy")}
    work = d / "agent-work"
    work.mkdir()
    out = subprocess.run([sys.executable, str(agent), "--expect", str(exp), "--workdir", str(work)],
                         env=env, capture_output=True, check=True).stdout
    if not json.loads(out).get("checks"):
        raise SystemExit("the recorded agent result has no checks")
    path = d / "agent-result.json"
    path.write_bytes(out)
    return path


def stand_in(d: Path, result: Path) -> Path:
    """The guests' python3: argv is (agent, --expect, EXPECT, ...) for vgpu and ansible alike."""
    path = d / "python-standin"
    path.write_text("#!/bin/sh\n"
                    '[ -s "$1" ] && [ -s "$3" ] || { echo "agent or expectation missing: $1 $3" >&2; exit 3; }\n'
                    f"exec cat {result}\n")
    path.chmod(0o755)
    return path


def hashed_line(name: str, kind: str, b64: str) -> str:
    salt = os.urandom(20)
    mac = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(mac).decode()} {kind} {b64}\n"


def known_hosts(d: Path, kh_line: str, n: int) -> Path:
    """The server's own line plus one hashed line per other guest of the fleet (10.x.y.z); n=0: that line only."""
    kind, b64 = kh_line.split()[1:3]
    lines = [hashed_line(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", kind, b64) for i in range(n)]
    path = d / f"known_hosts-{n}"
    path.write_text("".join(lines[: n // 2]) + kh_line + "".join(lines[n // 2:]))
    return path


def guests_file(d: Path, n: int, port: int, python: Path) -> Path:
    import yaml

    path = d / f"guests-{n}.yaml"
    path.write_text(yaml.safe_dump({
        "version": "v1",
        "defaults": {"host": "127.0.0.1", "port": port, "user": "root", "identity": str(d / "client"),
                     "expect": EXPECT, "python": str(python)},
        "guests": [{"name": f"g{i:04d}"} for i in range(n)]}))
    return path


def inventory(d: Path, n: int, port: int, python: Path) -> Path:
    path = d / f"inventory-{n}.ini"
    path.write_text("[guests]\n" + "".join(f"g{i:04d} ansible_host=127.0.0.1 ansible_port={port} "
                                           f"ansible_user=root vgpu_python={python}\n" for i in range(n)))
    return path


def measure(argv: list[str], *, env: dict, cwd: Path, log: Path) -> tuple[float, float, float, int]:
    """(wall s, CPU s of the process and its waited-for children, peak RSS MiB, exit code)."""
    with open(log, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(proc.pid, 0)
        took = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return took, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, proc.returncode


def run_vgpu(d: Path, repo: Path, n: int, concurrency: int, kh: Path, gfile: Path) -> dict:
    out = d / f"reports-{n}"
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(repo)}
    wall, cpu, rss, rc = measure([sys.executable, "-m", "vgpu", "validate", "--guests", str(gfile),
                                  "--known-hosts", str(kh), "--report-dir", str(out),
                                  "--concurrency", str(concurrency), "--quiet"],
                                 env=env, cwd=repo, log=d / "vgpu.log")
    report_ = json.loads((out / "validation-report.json").read_text())
    ok = sum(g["outcome"] == "ok" and bool(g["checks"]) for g in report_["guests"])
    if rc != 0 or ok != n:
        tail = (d / "vgpu.log").read_text()[-2000:]
        bad = [g["detail"] for g in report_["guests"] if g["outcome"] != "ok"][:3]
        raise SystemExit(f"vgpu run failed (rc {rc}, {ok}/{n} ok): {tail} {bad}")
    return {"wall_s": wall, "cpu_s": cpu, "rss_mib": rss}


def run_ansible(d: Path, n: int, concurrency: int, kh: Path, inv: Path, agent: Path, expect: Path) -> dict:
    ansible = shutil.which("ansible", path=str(Path(sys.executable).parent)) or shutil.which("ansible")
    if ansible is None:
        raise SystemExit("ansible is not installed: .venv/bin/pip install ansible-core (the [test] extra)")
    tree = d / "ansible-tree"
    shutil.rmtree(tree, ignore_errors=True)
    env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
           "ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.tree", "ANSIBLE_CALLBACK_TREE_DIR": str(tree),
           "ANSIBLE_PRIVATE_KEY_FILE": str(d / "client"),
           "ANSIBLE_SSH_ARGS": f"-o ControlMaster=auto -o ControlPersist=60s -o UserKnownHostsFile={kh}",
           "ANSIBLE_SSH_CONTROL_PATH_DIR": str(d / "cp"), "ANSIBLE_LOCAL_TEMP": str(d / "atmp"),
           "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3", "ANSIBLE_NOCOLOR": "1"}
    work = d / "ansible-work"
    work.mkdir(exist_ok=True)
    args = f"{agent} --expect {expect} --workdir {work} executable={{{{ vgpu_python }}}}"
    wall, cpu, rss, rc = measure([ansible, "all", "-i", str(inv), "-m", "script", "-a", args,
                                  "-f", str(concurrency)], env=env, cwd=d, log=d / "ansible.log")
    ok = 0
    for path in tree.glob("*") if tree.is_dir() else []:
        try:
            ok += bool(json.loads(json.loads(path.read_text())["stdout"]).get("checks"))
        except (ValueError, KeyError, TypeError):
            pass
    if rc != 0 or ok != n:
        raise SystemExit(f"ansible run failed (rc {rc}, {ok}/{n} ok): {(d / 'ansible.log').read_text()[-2000:]}")
    return {"wall_s": wall, "cpu_s": cpu, "rss_mib": rss}


def summarise(runs: list[dict], n: int) -> dict:
    med = {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "cpu_s", "rss_mib")}
    return {"wall_s": round(med["wall_s"], 2), "cpu_s": round(med["cpu_s"], 2),
            "cpu_ms_per_guest": round(1000 * med["cpu_s"] / n, 1), "peak_rss_mib": round(med["rss_mib"], 1),
            "runs_wall_s": [round(r["wall_s"], 2) for r in runs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--guests", default="256,1000", help="comma-separated fleet sizes [256,1000]")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--ansible", type=int, default=0, metavar="N", help="also compare with ansible at N guests")
    ap.add_argument("--ansible-concurrency", type=int, default=None, help="concurrency/forks for --ansible [same]")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--guest-shell-rc", action="store_true",
                    help="let the guests' login shell read its rc files (this machine's root ~/.bashrc)")
    ap.add_argument("--repo", type=Path, default=REPO, help="checkout whose vgpu to run [this one]")
    ap.add_argument("--plain-known-hosts", action="store_true",
                    help="known_hosts holds the server's line only (not one hashed line per guest)")
    ap.add_argument("--label", default="", help="recorded with the results (e.g. before, after)")
    ap.add_argument("--record", action="store_true", help="append to benchmarks/results/fleet_validate.jsonl")
    a = ap.parse_args()
    sizes = [int(s) for s in a.guests.split(",") if s.strip()]
    repo = a.repo.resolve()
    results = []
    ac = a.ansible_concurrency or a.concurrency
    with tempfile.TemporaryDirectory(prefix="vgpu-fleet-") as tmp:
        d = Path(tmp)
        keygen(d / "client")
        result = record_result(d)
        python = stand_in(d, result)
        port, pid, kh_line = start_sshd(d, () if a.guest_shell_rc else ("SetEnv SHLVL=1",))
        try:
            ac = a.ansible_concurrency or a.concurrency
            plan = list(dict.fromkeys([(n, "vgpu", a.concurrency) for n in sizes]
                                      + ([(a.ansible, "vgpu", ac), (a.ansible, "ansible", ac)] if a.ansible else [])))
            runs: dict[tuple[int, str, int], list[dict]] = {}
            for _ in range(a.repeat):  # interleaved, so drift in machine load hits every size and tool alike
                for n, tool, conc in plan:
                    kh = known_hosts(d, kh_line, 0 if a.plain_known_hosts else n)
                    if tool == "vgpu":
                        r = run_vgpu(d, repo, n, conc, kh, guests_file(d, n, port, python))
                    else:
                        r = run_ansible(d, n, conc, kh, inventory(d, n, port, python), d / "agent" / "vgpu-agent.pyz",
                                        d / "expect.json")
                    runs.setdefault((n, tool, conc), []).append(r)
                    print(f"  {tool:8s} {n:5d} guests, concurrency {conc}: {r['wall_s']:7.2f} s wall, "
                          f"{r['cpu_s']:6.2f} s CPU ({1000 * r['cpu_s'] / n:5.1f} ms/guest), "
                          f"peak RSS {r['rss_mib']:6.1f} MiB", flush=True)
        finally:
            os.kill(pid, signal.SIGTERM)
            for sock in (d / "cp").glob("*"):  # ansible's ControlPersist masters would linger 60 s
                subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "127.0.0.1"],
                               capture_output=True, check=False)
    load = os.getloadavg()[0]
    for (n, tool, conc), rs in runs.items():
        res = {"benchmark": "fleet_validate", "tool": tool, "guests": n, "concurrency": conc,
               "label": a.label, **summarise(rs, n), "agent": "stand-in (recorded result)",
               "known_hosts_lines": 1 if a.plain_known_hosts else n + 1,
               "load1": round(load, 2), "cpus": os.cpu_count(), "python": platform.python_version(),
               "date": time.strftime("%Y-%m-%d")}
        results.append(res)
        report(res, a.record, "fleet_validate")
    if a.ansible:
        v = next(r for r in results if r["tool"] == "vgpu" and r["guests"] == a.ansible and r["concurrency"] == ac)
        s = next(r for r in results if r["tool"] == "ansible")
        print(f"ratio ansible/vgpu at {a.ansible} guests: wall {s['wall_s'] / v['wall_s']:.2f}x, "
              f"CPU {s['cpu_s'] / v['cpu_s']:.2f}x")


if __name__ == "__main__":
    main()
