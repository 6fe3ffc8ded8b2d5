"""bench: benchmarks and the demo workload (never run as tests)."""
