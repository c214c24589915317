"""The `whilst` command's subcommands, one module each (see `whilst.cli`)."""
