"""Benchmarks behind ``skyrl bench``: the dispatch simulation (virtual clock, engine stand-in) and the real
CPU-stack dispatch run."""
