"""Command buffers that name their buffers directly, so that IREE 3.13's
`local-task` driver keeps them alive until the work that reads them has run.

By default iree-compile records each execution region once, with "indirect"
bindings that every submission fills from a binding table. On `local-task` (the
only driver that runs submissions on other threads than the caller's while the
caller goes on), a buffer that a pending submission reads through such a table
is freed when the program drops its last reference, a loop carry replaced by the
next iteration's for instance, and its memory is handed out again before the
submission reads it: gradients of vmapped loops came back wrong (some examples
as if their loop had run one step) in about 1 call of 100 when another function
ran between their calls, and sometimes crashed (a scatter at an index read from
reused memory). `iree_limits/local_task_binding_lifetime.py` reproduces
it. With direct bindings every submission holds its buffers: no wrong result in
15000 such calls, and loops ran at the same speed (0.89-1.02x on local-sync and
local-task: the sin loop, a loop gradient, the LSTM sample).

`DIRECT_BINDINGS` is passed for modules with an `llvm-cpu` target.
"""

DIRECT_BINDINGS = "--iree-hal-indirect-command-buffers=false"
