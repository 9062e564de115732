"""A pytest plugin for GPU memory per test (the memcheck OOM of docs/benchmarks.md "GPU tests and
checks"): after each test, PyTorch's live and peak bytes on the GPU, then the peak is reset.
  PYTHONPATH=lab python -m pytest -p mem_per_test -m gpu tests/test_gpu_layer.py -k batched"""
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    import torch
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    yield
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        gib = 2.0 ** 30
        print(f"\nMEM {item.name}: live {torch.cuda.memory_allocated() / gib:.2f} GiB, "
              f"peak {torch.cuda.max_memory_allocated() / gib:.2f} GiB, "
              f"reserved {torch.cuda.memory_reserved() / gib:.2f} GiB", flush=True)
