"""The flow-time noise levels the generators are measured at (torch-free: ``methods.params`` reads FiRe's default
from here when the config is checked)."""

# FiRe's fixed noise level in its paper (Sec. 4.1), at the reference resolution: FireParams.t's default, the
# level the pmf gate, the FLOP count and the timing parity measure the predictor at.
REFERENCE_T_FLOW = 0.4
# The flow times at which the generators are evaluated (the DDPM's Tweedie and the PMF's one-step prediction).
EVAL_T_FLOW: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8)
