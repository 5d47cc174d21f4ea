"""Guest validation: the agent that runs inside a VM, SSH fan-out, reports."""
