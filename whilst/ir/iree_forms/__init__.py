"""Forms that IREE 3.13 compiles and runs with XLA's results: the jaxpr rewrites an
exported function and its loop bodies get, one module per limitation of IREE 3.13,
each naming its reproducer (`iree_limits/`), so each can be deleted when IREE lifts
the limit."""
