"""The runtime's error type."""


class LoadError(RuntimeError):
    """Loading or calling a module failed; the message says why and what to do."""
