"""Stand-in ROCm tools for simulated guests: each replays a captured output from a replay folder.

sim_guest_env() copies this file into the simulated guest's bin folder and writes one tiny script
per tool (rocminfo, amd-smi, hipcc, ...) that calls ``main(tool, replay_dir, log)``. A replay file
is named after the command and its arguments ("amd-smi_static", "dkms_status", "rocminfo"); its
first line is a ``# replay: ...`` provenance header, the rest is printed verbatim. Lookup order:
the whole command line, then the command with each single argument in turn ("hipblaslt-bench_-v"),
then the bare command. Every call is appended to ``log`` (JSON lines) so tests can see what the
agent ran. ``hipcc`` "compiles" by checking its inputs and writing an executable that replays
the program's own output (the replay file named after the binary).
Standard library only, Python >= 3.8 (it runs under the guest's python3).
"""

import json
import os
import re
import stat
import sys

HEADER = "# replay:"
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")


def replay_name(parts):
    """The file name for a command line: unsafe characters become "_", at most 200 characters."""
    return _UNSAFE.sub("_", "_".join(parts))[:200]


def candidates(tool, args):
    names = [replay_name([tool] + list(args))] if args else []
    names += [replay_name([tool, a]) for a in args]
    return names + [replay_name([tool])]


def find_replay(replay_dir, tool, args):
    for name in candidates(tool, args):
        path = os.path.join(replay_dir, name)
        if os.path.isfile(path):
            return path
    return None


def replay_text(path):
    with open(path, encoding="utf-8", newline="") as fh:
        text = fh.read()
    if text.startswith(HEADER):
        text = text.split("\n", 1)[1] if "\n" in text else ""
    return text


def _log(log, tool, args):
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"tool": tool, "argv": list(args), "cwd": os.getcwd()}) + "\n")


def hipcc(args, replay_dir, bin_dir):
    """Check the arguments a real hipcc needs, then write the "compiled" replaying program."""
    out = args[args.index("-o") + 1] if "-o" in args and args.index("-o") + 1 < len(args) else None
    arch = [a for a in args if a.startswith("--offload-arch=")]
    sources = [a for a in args if a.endswith((".hip", ".cpp"))]
    missing = [s for s in sources if not os.path.isfile(s)]
    if not out or not arch or not sources or missing:
        sys.stderr.write("hipcc (stand-in): need -o OUT, --offload-arch=gfxNNN and an existing source; got %r\n"
                         % (args,))
        return 1
    script = ("#!/usr/bin/env python3\nimport sys\nsys.path.insert(0, %r)\nimport vgpu_standin\n"
              "sys.exit(vgpu_standin.main(%r, %r, None))\n") % (bin_dir, os.path.basename(out), replay_dir)
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(script)
    os.chmod(out, os.stat(out).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return 0


def main(tool, replay_dir, log, argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    _log(log, tool, args)
    if tool == "hipcc":
        return hipcc(args, replay_dir, os.path.dirname(os.path.abspath(__file__)))
    path = find_replay(replay_dir, tool, args)
    if path is None:
        sys.stderr.write("%s (stand-in): no replay file for %r in %s\n" % (tool, args, replay_dir))
        return 127
    sys.stdout.write(replay_text(path))
    sys.stdout.flush()
    return 0
