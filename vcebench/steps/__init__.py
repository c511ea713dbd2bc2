"""What each CLI verb does, as a library: the functions a verb (``vcebench.cli``) calls and another step may
reuse (``tune`` scores settings with ``explain.generate`` and ``evaluate.evaluate_task``). No argparse here."""
