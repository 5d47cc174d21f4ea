"""Pure data: no I/O in this package."""
