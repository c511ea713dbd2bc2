"""The two generative objectives trained here: the ``ddpm`` role (epsilon prediction) and the ``pmf`` role
(pixel MeanFlow), their shared UNet backbone, and their quality checks (one-step FID, the PMF's gate)."""
