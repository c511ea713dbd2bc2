"""vcebench: a benchmark harness for visual counterfactual explanations."""

__version__ = "0.1.0"
