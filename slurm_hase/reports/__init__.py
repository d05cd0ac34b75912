"""Fairness and usage reports computed from sacct accounting records."""
