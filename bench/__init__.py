"""Benchmarks of wikiq: ``python -m bench`` runs its sections, prints a table, writes bench/latest.json."""
