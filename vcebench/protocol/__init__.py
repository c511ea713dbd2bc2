"""The fairness protocol: the noise rule (``noise``), the tuning rule (``tune``), one job's checked settings
(``settings``, ``run_settings``) and the PMF vs DDPM parity check (``parity``)."""
