import os

os.environ.setdefault("VCEBENCH_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# the kernels every vcebench job runs (vcebench.config.kernels), set before torch starts: tests compute the same
# numbers on any x86-64 CPU
os.environ.setdefault("VCEBENCH_CPU_ISA", "avx2")
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")
os.environ.setdefault("MKL_CBWR", "COMPATIBLE")
# first-seen sha256 of real-data split files (vcebench.data.fingerprints) go to a temporary file, not resources/
os.environ.setdefault("VCEBENCH_DATA_FINGERPRINTS",
                      os.path.join(__import__("tempfile").mkdtemp(prefix="vcebench-fp-"), "fingerprints.json"))

import pytest  # noqa: E402

pytest.register_assert_rewrite("tests.e2e_real")  # its checks, shared by the two real-format pipeline files
import torch  # noqa: E402

torch.set_num_threads(1)
torch.set_flush_denormal(True)


@pytest.fixture(scope="session")
def cfg():
    from vcebench.config.load import load_config

    return load_config()


def pytest_collection_modifyitems(config, items):
    """The longest test files first (tests/durations.json, scripts/test_durations.py): `make test`'s workers take a
    file at a time in this order (`--no-loadscope-reorder`: xdist would otherwise sort the files by their number of
    tests), so the long ones start at once and the short ones fill in at the end. The tests of a file keep their
    order; a file without a measured time keeps its place after the measured ones."""
    import json
    from pathlib import Path

    path = Path(__file__).with_name("durations.json")
    seconds = json.loads(path.read_text()) if path.is_file() else {}
    rank = {item: -seconds.get(item.nodeid.split("::")[0], 0.0) for item in items}
    items.sort(key=rank.__getitem__)  # stable: ties keep the collection order
