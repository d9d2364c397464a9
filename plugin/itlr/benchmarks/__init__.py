"""Speed benchmarks behind `itlr bench latency|ingest|encode`; results go to docs/benchmarks.md."""
