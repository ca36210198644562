# make bench: layer0's reproducible performance report (docs/performance.md explains it).
# Flags for the report go in BENCHFLAGS, e.g. make bench BENCHFLAGS="-duration 10s -out bench/out".
.PHONY: bench bench-quick
BENCHFLAGS ?=

bench:
	go run ./bench $(BENCHFLAGS)

# A short run that checks the report works end to end (about a minute of load).
bench-quick:
	go run ./bench -duration 2s -warmup 500ms -rates 1000,2000 -stream-rates 500 -streams 1000 -gobench "" -protocol-rounds 1 -one-conn-rounds 2 -one-conn-duration 1s $(BENCHFLAGS)
