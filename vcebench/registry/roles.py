"""The network roles' facts the workflow and the trainers share (torch-free)."""

GENERATIVE = ("ddpm", "pmf")  # trained by ``training.train_generative`` (any device, several processes); bf16 applies
# oracle after the classifier (transfer); ddpm after the FID features; pmf after all three: its quality gate
GATE_ROLES = {"oracle": ("classifier",), "ddpm": ("fid_features",), "pmf": ("classifier", "fid_features", "ddpm")}
