"""Models the project did not write, ported to named axes by following docs/library_authors.md; each
runs next to its original (an installed package) in the tests and the benchmarks."""
