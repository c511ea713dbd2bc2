"""Plumbing every layer may use: errors, atomic files, random streams, the Fréchet distance, deep merge,
process-wide torch settings. Imports nothing else of vcebench."""
