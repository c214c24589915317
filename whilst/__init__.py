"""whilst: data-dependent loops that are differentiable and deployable."""
from whilst import lowering as _lowering  # noqa: F401  (registers the lowering rules)
from whilst.frontend import while_loop

__all__ = ["while_loop"]
