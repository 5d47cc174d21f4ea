#!/usr/bin/env python3
"""Benchmark: `vgpu validate` vs `ansible -m script` running the same agent on the same guests.

Starts one real sshd on 127.0.0.1 (strict host keys for both tools), builds N simulated ROCm
guests (vgpu.sim.guests; the agent run over SSH sees them through its environment), then times:

  vgpu:    python -m vgpu validate --guests FILE --concurrency C    (paramiko, one connection per guest)
  ansible: ansible all -i INVENTORY -m script -a "AGENT --expect ..." -f C   (OpenSSH, ControlPersist)

Both include their own start-up and the same agent zipapp doing the same checks; ansible is
given the expectation file in place (vgpu uploads it), which only favours ansible. Each tool's
results are checked (every guest returned an agent result) so a fast failure cannot pass as
speed. Prints a table and, with --record, writes benchmarks/results/validate_fanout.json.

    .venv/bin/python benchmarks/validate_fanout.py [--guests 32] [--concurrency 8] [--repeat 3] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from vgpu.guest.bundle import build_agent  # noqa: E402
from vgpu.guest.expect import build_expectation  # noqa: E402
from vgpu.sim.guests import SIM_TARGET, sim_guest_env  # noqa: E402


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def start_sshd(d: Path, extra: tuple[str, ...] = ()) -> tuple[int, int, str]:
    """(port, pid, known_hosts line) of a fresh sshd accepting d/client.pub; ``extra``: more config lines."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host_key = keygen(d / "host")
    cfg = d / "sshd_config"
    cfg.write_text("\n".join([
        "ListenAddress 127.0.0.1", f"Port {port}", f"HostKey {host_key}", f"PidFile {d / 'sshd.pid'}",
        f"AuthorizedKeysFile {d / 'client.pub'}", "PasswordAuthentication no", "UsePAM no", "StrictModes no",
        "Subsystem sftp internal-sftp", "MaxStartups 200:30:400", "MaxSessions 100", "LogLevel ERROR", *extra, ""]))
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    subprocess.run(["/usr/sbin/sshd", "-f", str(cfg), "-E", str(d / "sshd.log")], check=True)
    for _ in range(500):
        if (d / "sshd.pid").exists():
            break
        time.sleep(0.01)
    kind, b64 = host_key.with_suffix(".pub").read_text().split()[:2]
    return port, int((d / "sshd.pid").read_text().split()[0]), f"[127.0.0.1]:{port} {kind} {b64}\n"


def prepare(d: Path, n: int, port: int) -> dict:
    """Guests file, inventory, per-guest env wrappers, agent and expectation for N guests."""
    import yaml

    expect = {"model": SIM_TARGET["model"], "compute": SIM_TARGET["compute"], "memory": SIM_TARGET["memory"],
              "vf": SIM_TARGET["is_vf"]}
    agent = build_agent(d / "agent")
    exp_path = d / "expect.json"
    exp_path.write_text(json.dumps(build_expectation(SIM_TARGET["model"], compute=SIM_TARGET["compute"],
                                                     memory=SIM_TARGET["memory"], is_vf=SIM_TARGET["is_vf"])))
    guests, inventory = [], ["[guests]"]
    for i in range(n):
        name = f"g{i:02d}"
        env = sim_guest_env(d / "sim" / name, scenario="healthy")
        guests.append({"name": name, "host": "127.0.0.1", "port": port, "user": "root",
                       "identity": str(d / "client"), "expect": expect, "env": env})
        wrapper = d / "sim" / name / "python-env"  # ansible ad-hoc has no per-host environment
        wrapper.write_text("#!/bin/sh\n" + "".join(f"export {k}='{v}'\n" for k, v in env.items())
                           + 'exec python3 "$@"\n')
        wrapper.chmod(0o755)
        inventory.append(f"{name} ansible_host=127.0.0.1 ansible_port={port} ansible_user=root "
                         f"vgpu_python={wrapper}")
    (d / "guests.yaml").write_text(yaml.safe_dump({"version": "v1", "guests": guests}))
    (d / "inventory.ini").write_text("\n".join(inventory) + "\n")
    return {"agent": agent, "expect": exp_path}


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_vgpu(d: Path, concurrency: int, n: int, repo: Path = REPO) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the controller side: vgpu and its threads)."""
    out = d / "reports"
    c0, t0 = _child_cpu(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "vgpu", "validate", "--guests", str(d / "guests.yaml"),
                           "--known-hosts", str(d / "known_hosts"), "--report-dir", str(out),
                           "--concurrency", str(concurrency), "--quiet"],
                          cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)}, capture_output=True, text=True)
    took, cpu = time.perf_counter() - t0, _child_cpu() - c0
    report = json.loads((out / "validation-report.json").read_text())
    ok = [g for g in report["guests"] if g["outcome"] == "ok" and g["checks"]]
    if proc.returncode != 0 or len(ok) != n:
        raise SystemExit(f"vgpu run failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
    return took, cpu


def run_ansible(d: Path, files: dict, concurrency: int, n: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the controller side: ansible, its forks and ssh clients)."""
    ansible = shutil.which("ansible", path=str(Path(sys.executable).parent)) or shutil.which("ansible")
    if ansible is None:
        raise SystemExit("ansible is not installed: .venv/bin/pip install ansible-core (the [test] extra)")
    tree = d / "ansible-tree"  # the builtin tree callback writes each host's result as JSON
    shutil.rmtree(tree, ignore_errors=True)
    env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
           "ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.tree", "ANSIBLE_CALLBACK_TREE_DIR": str(tree),
           "ANSIBLE_PRIVATE_KEY_FILE": str(d / "client"),
           "ANSIBLE_SSH_ARGS": ("-o ControlMaster=auto -o ControlPersist=60s "
                                f"-o UserKnownHostsFile={d / 'known_hosts'}"),
           "ANSIBLE_SSH_CONTROL_PATH_DIR": str(d / "cp"), "ANSIBLE_LOCAL_TEMP": str(d / "atmp"),
           "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3", "ANSIBLE_NOCOLOR": "1"}
    workdir = d / "ansible-work"
    workdir.mkdir(exist_ok=True)
    args = f"{files['agent']} --expect {files['expect']} --workdir {workdir} executable={{{{ vgpu_python }}}}"
    c0, t0 = _child_cpu(), time.perf_counter()
    proc = subprocess.run([ansible, "all", "-i", str(d / "inventory.ini"), "-m", "script", "-a", args,
                           "-f", str(concurrency)], env=env, capture_output=True, text=True)
    took, cpu = time.perf_counter() - t0, _child_cpu() - c0
    ok = []
    for path in tree.glob("*") if tree.is_dir() else []:
        try:
            if json.loads(json.loads(path.read_text())["stdout"]).get("checks"):
                ok.append(path.name)
        except (ValueError, KeyError, TypeError):
            pass
    if proc.returncode != 0 or len(ok) != n:
        raise SystemExit(f"ansible run failed (rc {proc.returncode}): {proc.stdout[-1500:]} "
                         f"{proc.stderr[-1500:]}")
    return took, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--guests", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--record", action="store_true", help="write benchmarks/results/validate_fanout.json")
    ap.add_argument("--repo", type=Path, default=REPO, help="checkout whose vgpu to run [this one]")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vgpu-bench-") as tmp:
        d = Path(tmp)
        keygen(d / "client")
        port, pid, kh_line = start_sshd(d)
        try:
            (d / "known_hosts").write_text(kh_line)
            files = prepare(d, a.guests, port)
            times: dict[str, list[float]] = {"vgpu": [], "ansible": []}
            cpu: dict[str, list[float]] = {"vgpu": [], "ansible": []}
            for _ in range(a.repeat):  # interleaved, so drift in machine load hits both alike
                for name, fn in (("vgpu", lambda: run_vgpu(d, a.concurrency, a.guests, a.repo.resolve())),
                                 ("ansible", lambda: run_ansible(d, files, a.concurrency, a.guests))):
                    wall, used = fn()
                    times[name].append(round(wall, 2))
                    cpu[name].append(round(used, 2))
        finally:
            os.kill(pid, signal.SIGTERM)
            for sock in (d / "cp").glob("*"):  # ansible's ControlPersist masters would linger 60 s
                subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "127.0.0.1"],
                               capture_output=True, check=False)
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    ratio = med["ansible"] / med["vgpu"]
    print(f"{a.guests} simulated guests over sshd, concurrency/forks {a.concurrency}, {a.repeat} runs each")
    for k, v in times.items():
        print(f"  {k:8s} median {med[k]:6.2f} s   runs: {', '.join(f'{x:.2f}' for x in v)}   "
              f"controller CPU median {med_cpu[k]:.2f} s")
    print(f"  ratio ansible/vgpu: {ratio:.2f}x")
    if a.record:
        result = {"benchmark": "validate_fanout", "guests": a.guests, "concurrency": a.concurrency,
                  "runs": times, "median_s": med, "ratio": round(ratio, 2), "controller_cpu_s": cpu,
                  "cpu_ratio": round(med_cpu["ansible"] / med_cpu["vgpu"], 2), "cpus": os.cpu_count(),
                  "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}
        out = REPO / "benchmarks" / "results" / "validate_fanout.json"
        out.parent.mkdir(exist_ok=True)
        tmp_out = out.with_suffix(".json.tmp")
        tmp_out.write_text(json.dumps(result, indent=2) + "\n")
        os.replace(tmp_out, out)
        print(f"  recorded in {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
