"""Cost measurement: FLOP counting, timing and memory (``measure``), per-call FLOPs (``flops``), the cost
columns (``columns``), a task's profile (``task_profile``) and random-weight stand-ins (``standins``)."""
