"""Integrations of whilst's loops into libraries that choose their loops themselves
(each submodule imports its library: `whilst.integrations.diffrax`)."""
