"""The host's amd-smi (GIM build) as a second source of truth: its GPUs and VFs, and each GPU's firmware.

Optional: a host without amd-smi plans as before and the plan says what could not be checked. Formats from
AMD's GIM documentation (amd/MxGPU-Virtualization ``smi-lib/docs/how_to/amdsmi_cli_usage.md``) and real
captures (tests/fixtures/amd-smi): ``list --json`` is a list of ``{gpu, bdf, uuid, vfs: [{vf, bdf, uuid}]}``;
``static --json`` is ``{"gpu_data": [{gpu, bus: {bdf}, ifwi|vbios: {name, version, part_number}}]}`` and the
plain-text ``static`` prints ``GPU: N`` with indented ``SECTION:`` and ``KEY: value`` lines. A VBIOS/IFWI
named ``..._1VF`` is a 1-VF build (docs/hardware.md §9; the naming rule beyond that suffix is UNVERIFIED).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from vgpu.errors import HostError
from vgpu.model.pci import PciAddress

# Return codes (amdsmi_cli_usage.md "Return Codes"). amd-smi returns them negative; a process exit status is
# the low 8 bits, so -3 arrives as 253. Library errors (-1001..-1014) wrap to 23..10 and cannot be told from
# small positive codes: those are reported as "exit N".
RETURN_CODES = {
    -1: "invalid command", -2: "invalid parameter", -3: "device not found", -4: "invalid file path",
    -5: "invalid parameter value", -6: "missing parameter value", -7: "command not supported",
    -8: "parameter not supported", -9: "command requires a target", -10: "invalid subcommand",
    -11: "permission denied", -100: "unknown error",
}


class AmdSmiError(HostError):
    """amd-smi ran and failed; ``code`` is its (signed) return code."""

    def __init__(self, message: str, code: int, **kw):
        super().__init__(message, **kw)
        self.code = code


class AmdSmiNotSupported(AmdSmiError):
    """-7/-8: this amd-smi or GPU does not support the command (an older GIM build)."""


class AmdSmiPermission(AmdSmiError):
    """-11: amd-smi needs root on the host."""


class AmdSmiNoDevice(AmdSmiError):
    """-3: the GPU asked about is not there."""


_TYPES = {-3: AmdSmiNoDevice, -7: AmdSmiNotSupported, -8: AmdSmiNotSupported, -11: AmdSmiPermission}


def error_for(status: int, args: Sequence[str], stderr: str) -> AmdSmiError:
    """The typed error for an amd-smi exit status (0-255 as the OS reports it, or already signed)."""
    code = status - 256 if status >= 128 else status
    what = RETURN_CODES.get(code, f"exit {status}")
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    cls = _TYPES.get(code, AmdSmiError)
    hint = "run vgpu as root (amd-smi needs it on a GIM host)" if cls is AmdSmiPermission else None
    return cls(f"amd-smi {' '.join(args)} failed: {what}" + (f" ({last[:200]})" if last else ""), code, hint=hint)


@dataclass(frozen=True)
class SmiVf:
    index: int
    bdf: PciAddress
    uuid: str = ""


@dataclass(frozen=True)
class SmiGpu:
    index: int
    bdf: PciAddress
    uuid: str = ""
    vfs: tuple[SmiVf, ...] = ()


@dataclass(frozen=True)
class Firmware:
    """A GPU's VBIOS/IFWI as amd-smi static reports it."""

    bdf: PciAddress
    name: str
    version: str = ""
    part_number: str = ""

    @property
    def single_vf(self) -> bool:
        return self.name.strip().upper().endswith("_1VF")


def parse_list_json(text: str) -> list[SmiGpu]:
    """``amd-smi list --json``. Raises ValueError on anything else."""
    data = json.loads(_body(text))
    if not isinstance(data, list):
        raise ValueError("amd-smi list --json: expected a JSON list")
    out = []
    for gpu in data:
        vfs = tuple(SmiVf(int(vf["vf"]), PciAddress.parse(vf["bdf"]), str(vf.get("uuid", "")))
                    for vf in gpu.get("vfs") or ())
        out.append(SmiGpu(int(gpu["gpu"]), PciAddress.parse(gpu["bdf"]), str(gpu.get("uuid", "")), vfs))
    return out


def parse_static(text: str) -> list[Firmware]:
    """The firmware of each GPU from ``amd-smi static`` (``--json`` or plain text, ``--bus --vbios``/``--ifwi``)."""
    body = _body(text)
    if body.lstrip().startswith(("{", "[")):
        return _static_json(json.loads(body))
    return _static_text(body)


def _static_json(data) -> list[Firmware]:
    gpus = data.get("gpu_data", []) if isinstance(data, dict) else data
    out = []
    for gpu in gpus if isinstance(gpus, list) else ():
        fw = gpu.get("ifwi") or gpu.get("vbios")
        bdf = (gpu.get("bus") or {}).get("bdf")
        if isinstance(fw, dict) and isinstance(fw.get("name"), str) and isinstance(bdf, str):
            out.append(Firmware(PciAddress.parse(bdf), fw["name"], str(fw.get("version", "")),
                                str(fw.get("part_number", ""))))
    return out


def _static_text(body: str) -> list[Firmware]:
    out: list[Firmware] = []
    for block in _gpu_blocks(body):
        bdf = block.get("BUS", {}).get("BDF")
        fw = block.get("IFWI") or block.get("VBIOS") or {}
        if bdf and fw.get("NAME"):
            out.append(Firmware(PciAddress.parse(bdf), fw["NAME"], fw.get("VERSION", ""), fw.get("PART_NUMBER", "")))
    return out


def _gpu_blocks(body: str) -> list[dict[str, dict[str, str]]]:
    """``GPU: N`` blocks of ``SECTION:`` headers (4-space indent) and ``KEY: value`` lines (8 spaces)."""
    blocks: list[dict[str, dict[str, str]]] = []
    section = None
    for line in body.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, _, value = stripped.partition(":")
        if indent == 0 and key == "GPU":
            blocks.append({})
            section = None
        elif blocks and indent == 4 and not value.strip():
            section = blocks[-1].setdefault(key.strip(), {})
        elif blocks and section is not None and indent >= 8:
            section.setdefault(key.strip(), value.strip())
    return blocks


def _body(text: str) -> str:
    """The output without fixture comment lines (``# ...`` before the data)."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("# "))


Runner = Callable[[Sequence[str]], tuple[int, str, str]]  # args after "amd-smi" -> (status, stdout, stderr)


def system_runner(binary: str | None = None) -> Runner | None:
    """Runs this host's amd-smi (argument lists, never a shell); None when it is not installed."""
    path = binary or shutil.which("amd-smi")
    if path is None:
        return None

    def run(args: Sequence[str]) -> tuple[int, str, str]:
        try:
            proc = subprocess.run([path, *args], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 156, "", str(exc)  # as amd-smi's "unknown error" (-100 is exit status 156)
        return proc.returncode, proc.stdout, proc.stderr
    return run


@dataclass
class SmiView:
    """What amd-smi said, or why it said nothing (``unavailable``: one sentence for the plan)."""

    gpus: list[SmiGpu] = field(default_factory=list)
    firmware: dict[PciAddress, Firmware] = field(default_factory=dict)
    unavailable: str | None = None


def read_amdsmi(runner: Runner | None) -> SmiView:
    """``list --json`` and ``static --bus --ifwi --json``; never raises: a failure becomes ``unavailable``."""
    if runner is None:
        return SmiView(unavailable="amd-smi (GIM build) is not installed on this host")
    view = SmiView()
    try:
        view.gpus = parse_list_json(_run(runner, ("list", "--json")))
        view.firmware = {f.bdf: f for f in parse_static(_run(runner, ("static", "--bus", "--ifwi", "--json")))}
    except AmdSmiError as exc:
        view.unavailable = exc.message
    except (ValueError, KeyError, TypeError) as exc:
        view.unavailable = f"amd-smi printed something vgpu cannot read ({type(exc).__name__}: {str(exc)[:120]})"
    return view


def _run(runner: Runner, args: Sequence[str]) -> str:
    status, out, err = runner(args)
    if status != 0:
        raise error_for(status, args, err)
    return out
