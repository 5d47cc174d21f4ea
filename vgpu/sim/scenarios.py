"""The simulated guests' scenario names (vgpu.sim.guests), in a module that imports nothing: `vgpu validate
--help` lists them without loading the simulator."""

SCENARIOS: tuple[str, ...] = ("healthy", "slow", "throttling", "no-rocm", "missing-tools", "wrong-partition")
