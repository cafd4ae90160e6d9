"""Perf runs against a served repository: load generation, results.json, reports."""
