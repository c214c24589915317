"""Reverse mode of `functional_while_p`: how a loop's steps are kept for its gradient
While. `_policy` chooses among the strategies: `_stored` (every step's residuals),
`_checkpointed` (K copies of the carry, steps recomputed by the binomial schedule of
`_schedule`) and `_budget` (stored chunks within a memory budget, checkpointed
between them); `_packing` packs a step's small residual rows."""
