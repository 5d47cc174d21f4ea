"""Stand-in ROCm tools for simulated guests: each replays a captured output from a replay folder.

sim_guest_env() copies this file into the simulated guest's bin folder and writes one tiny script
per tool (rocminfo, amd-smi, hipcc, ...) that calls ``main(tool, replay_dir, log)``. A replay file
is named after the command and its arguments ("amd-smi_static", "dkms_status", "rocminfo"); its
first line is a ``# replay: ...`` provenance header, the rest is printed verbatim. Only the whole
command line matches: an argument list with no capture is refused (exit 127, one line on stderr), never
answered with another command's output, so a wrong benchmark argument fails the tests. A name longer
than 200 characters keeps its first 150 and gets the SHA-256 of the whole name. A file may hold several
outputs separated by ``# replay: next`` lines: the n-th identical call gets the n-th (the last repeats),
which is how a throttling GPU is simulated. Every call is appended to ``log`` (JSON lines) so tests can
see what the agent ran. ``hipcc`` "compiles" by checking its inputs and writing an executable that replays
the program's own output (the replay file named after the binary).
Standard library only, Python >= 3.8 (it runs under the guest's python3).
"""

import hashlib
import json
import os
import re
import stat
import sys

HEADER = "# replay:"
NEXT = "# replay: next"
NAME_LIMIT = 200
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")


def replay_name(parts):
    """The file name for a command line: unsafe characters become "_"; a long one is cut and hashed."""
    name = _UNSAFE.sub("_", "_".join(parts))
    if len(name) <= NAME_LIMIT:
        return name
    return name[:150] + "_" + hashlib.sha256(name.encode()).hexdigest()[:16]


def find_replay(replay_dir, tool, args):
    path = os.path.join(replay_dir, replay_name([tool] + list(args)))
    return path if os.path.isfile(path) else None


def replay_text(path, call=0):
    """The ``call``-th output in the file (0-based; the last one repeats), without provenance lines."""
    with open(path, encoding="utf-8", newline="") as fh:
        text = fh.read()
    if text.startswith(HEADER) and not text.startswith(NEXT):
        text = text.split("\n", 1)[1] if "\n" in text else ""
    sections = text.split(NEXT + "\n")
    return sections[min(call, len(sections) - 1)]


def earlier_calls(log, tool, args):
    """How many times this exact command ran before (read back from the call log)."""
    if not log or not os.path.exists(log):
        return 0
    with open(log, encoding="utf-8") as fh:
        calls = [json.loads(line) for line in fh if line.strip()]
    return sum(c.get("tool") == tool and c.get("argv") == list(args) for c in calls)


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
    call = earlier_calls(log, tool, args)
    _log(log, tool, args)
    if tool == "hipcc":
        return hipcc(args, replay_dir, os.path.dirname(os.path.abspath(__file__)))
    path = find_replay(replay_dir, tool, args)
    if path is None:
        sys.stderr.write("%s (stand-in): no capture of this exact command (%s) in %s: refused\n"
                         % (tool, replay_name([tool] + args), replay_dir))
        return 127
    sys.stdout.write(replay_text(path, call))
    sys.stdout.flush()
    return 0
