"""The training machinery every role shares: the loops, distributed data parallel, CUDA-graph steps and the
checks of a role's settings block."""
