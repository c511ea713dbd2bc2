"""Cost measurement: FLOP counting, timing and memory (``measure``), per-call FLOPs (``flops``), the cost
columns (``columns``) and random-weight stand-ins (``standins``); a method's profile on a task is
``vcebench.steps.profile``."""
