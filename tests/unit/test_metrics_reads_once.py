"""`vgpu metrics` reads the host once: one inventory feeds the GPU metrics, the VM holders and the drift
comparison, so that they describe one moment (and the command starts in under 0.3 s, benchmarks/README.md)."""

from __future__ import annotations

from click.testing import CliRunner

from simhelp import fresh_host
from vgpu.cli import cli


def test_metrics_discovers_the_host_once(tmp_path, monkeypatch):
    from vgpu import provision
    from vgpu.host import discovery
    from vgpu.profiles import load_profile

    host = fresh_host(tmp_path)
    provision.provision(host.target(), load_profile("mi300x-4vf"))
    calls = []
    real = discovery.discover

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(discovery, "discover", counting)
    monkeypatch.setattr(provision, "discover", counting)
    result = CliRunner().invoke(cli, ["metrics", "--simulate", "--sim-dir", str(host.state_dir)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert 'vgpu_profile_in_sync{profile="mi300x-4vf"} 1.0' in result.output
    assert 'vgpu_gpu_vfs{gpu="0000:05:00.0"} 4.0' in result.output
    assert len(calls) == 1
