"""What every room of the kit shares: the settings it reads, the result type, the cache helpers, the sampling warp, the
prompts, the theory curves, tracebacks, the no-progress causes and the clock and forward counters."""
