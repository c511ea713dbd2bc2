import os

os.environ.setdefault("VCEBENCH_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)
torch.set_flush_denormal(True)


@pytest.fixture(scope="session")
def cfg():
    from vcebench.config import load_config

    return load_config()
