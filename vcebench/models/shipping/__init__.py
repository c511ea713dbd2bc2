"""What ships with a network: its card (recipe, sha256, where it was trained) and the truth checks of the
judges (how well a judge agrees with the known counterfactual)."""
