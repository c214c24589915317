"""The one error type subcommands raise: `whilst.cli` prints its message alone."""


class CLIError(Exception):
    """A user-facing failure: the message says what went wrong and what to do."""
