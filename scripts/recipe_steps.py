"""Print the training steps of a network recipe, the config files merged (for scripts/cpu_networks.sh and
scripts/ship_cpu_networks.sh):  python scripts/recipe_steps.py DATASET ROLE --config A.yaml [--config B.yaml ...]"""

import sys

from vcebench.config.load import load_config

ds, role, files = sys.argv[1], sys.argv[2], sys.argv[4::2]
print(load_config(files)["models"][ds][role]["steps"])
