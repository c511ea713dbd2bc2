"""The network roles' facts the workflow and the trainers share (torch-free): the one home of the role
vocabulary (``vcebench.registry.MODEL_ROLES``, ``vcebench.models.ROLES`` and the CLI's choices are these)."""

# every network role a method or metric may ask for, in TaskModels' field order
ROLES = ("classifier", "ddpm", "pmf", "perceptual", "oracle", "identity", "simsiam", "fid_features")
# the order `vcebench train` lists them and the workflow trains them: the judges first, the generative roles last
TRAINING_ORDER = ("classifier", "oracle", "identity", "perceptual", "simsiam", "fid_features", "ddpm", "pmf")

# the two ways a classifier's output reads as one binary query (config `models.<dataset>.classifier.head`,
# ``vcebench.models.base.BinaryHead``)
HEAD_KINDS = ("1logit", "2logit")
GENERATIVE = ("ddpm", "pmf")  # trained by ``training.train_generative`` (any device, several processes); bf16 applies
# oracle after the classifier (transfer); ddpm after the FID features; pmf after all three: its quality gate
GATE_ROLES = {"oracle": ("classifier",), "ddpm": ("fid_features",), "pmf": ("classifier", "fid_features", "ddpm")}
# networks a recipe trains against (a loss term's network): {role: {weight key: network role}}, each needed (and
# trained first) only when the recipe sets that weight above 0; the pmf's pMF-style losses on its one-step
# prediction (vcebench.models.generative.meanflow.ImageLoss)
LOSS_ROLES = {"pmf": {"perceptual_weight": "perceptual", "features_weight": "fid_features"}}


def loss_roles(role: str, settings: dict | None) -> tuple[str, ...]:
    """The roles ``role``'s recipe ``settings`` (a ``models.<dataset>.<role>`` block) trains against."""
    settings = settings or {}
    return tuple(net for key, net in LOSS_ROLES.get(role, {}).items() if float(settings.get(key) or 0) > 0)
