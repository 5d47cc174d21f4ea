"""Fleet roll-outs: a canary, then waves, each gated by validating its guests and comparing with a baseline.

- waves.py: the pure part: which hosts go in which wave (Ansible's ``serial`` semantics, a canary that never
  mixes with later waves, a maximum of unavailable hosts that counts failed ones) and each host's guests;
- state.py: the roll-out's record (schema ``vgpu.rollout/v1``), read back as hostile input, written atomically,
  one run at a time per state directory;
- runner.py: runs the waves through the collection's playbooks (ansible-runner) and gates each one;
- the CLI is vgpu/cli/rollout.py; docs/rollout.md is the operator's guide.
"""
