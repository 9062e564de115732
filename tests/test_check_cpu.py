"""`moegen check`'s control flow on the CPU, around a stand-in layer: a call that raises ends the check
naming its kernels and T, --kernels restricts the pairs, and a name not in the library is an error.
(The kernels themselves are checked on a GPU: tests/test_gpu_layer.py.)"""
import time
from types import SimpleNamespace

import pytest
import torch

from moegen import check
from moegen.spec import load_model

KERNELS = [SimpleNamespace(name=n, gemm=n.split("_")[2]) for n in
           ("moegen_sm90_gemm1_a", "moegen_sm90_gemm1_b", "moegen_sm90_gemm2_c", "moegen_sm90_gemm2_d")]


class StandIn:
    """Returns the reference's own output (so every run passes), or raises for one kernel."""

    def __init__(self, failing: str | None = None, first_call_seconds: float = 0.0, batched_writes_all=None):
        self.spec = load_model("qwen3-30b-a3b")
        # batched_writes_all: None, no batched calls; False, writes the counted rows; True, every row
        self.library = SimpleNamespace(max_tokens_per_expert=0 if batched_writes_all is None else 1 << 20)
        self.batched_writes_all = batched_writes_all
        self.manifest = SimpleNamespace(activation_format="bf16", variant="qwen3-30b-a3b", arch="sm90",
                                        data={"toolchain": {"nvcc": "V13.0.88", "cutlass": "4.2.0"}})
        self.gpu = SimpleNamespace(name="stand-in", driver="580.159.04", cuda="13.0", sm_count=132)
        self.weight_layout, self.kernels = "sm90_e2m1_atom64", KERNELS
        self.failing, self.first_call_seconds, self.calls = failing, first_call_seconds, []

    def choose_kernels(self, T):
        return (0, 2)

    def __call__(self, hidden, logits, weights, score_bias, kernels=(0, 2), poison=False):
        if not self.calls:
            time.sleep(self.first_call_seconds)
        self.calls.append(tuple(self.kernels[k].name for k in kernels))
        if self.failing in self.calls[-1]:
            raise RuntimeError("moegen (libmoegen-x.so): gemm1: an illegal memory access was encountered")
        ids = torch.zeros((hidden.shape[0], self.spec.top_k), dtype=torch.int64)
        return SimpleNamespace(out=torch.zeros(hidden.shape[0], self.spec.hidden_size), topk_ids=ids,
                               topk_weights=torch.ones(ids.shape))

    def experts(self, hidden, ids, weights, prepared, kernels=None, poison=False):
        return self(hidden, None, None, None, kernels=kernels).out

    def experts_batched(self, hidden, counts, prepared, num_tokens, kernels=None, poison=False):
        self.calls.append(("batched", num_tokens))
        out = torch.full(hidden.shape, float("nan"))
        written = torch.arange(hidden.shape[1])[None, :] < counts[:, None]
        out[written if not self.batched_writes_all else torch.ones_like(written)] = 0.0
        return out


@pytest.fixture
def on_cpu(monkeypatch):
    monkeypatch.setattr(check, "random_weights", lambda *a, **k: SimpleNamespace(prepared=None))
    monkeypatch.setattr(check, "random_inputs", lambda spec, T, dev, seed, skew=False: SimpleNamespace(
        hidden=torch.zeros(T, spec.hidden_size), logits=None, score_bias=None))
    monkeypatch.setattr(check, "reference_output", lambda spec, w, x, ids, fmt: torch.zeros(x.hidden.shape[0],
                                                                                          spec.hidden_size))
    monkeypatch.setattr(check.torch.cuda, "synchronize", lambda: None)

    class NoGraph:
        def replay(self):
            pass
    monkeypatch.setattr(check.torch.cuda, "CUDAGraph", NoGraph)
    monkeypatch.setattr(check.torch.cuda, "graph", lambda g: __import__("contextlib").nullcontext())


def test_a_call_that_raises_ends_the_check_naming_where(on_cpu):
    lines = []
    assert not check.check_library(StandIn(failing="moegen_sm90_gemm1_b"), [0, 5], seed=1, log=lines.append)
    assert lines[-2].startswith("FAIL  T=0      moegen_sm90_gemm1_b + moegen_sm90_gemm2_d")
    assert "stopped at T=0 moegen_sm90_gemm1_b + moegen_sm90_gemm2_d: moegen (libmoegen-x.so): gemm1: an illegal" \
        in lines[-1] and "(seed 1)" in lines[-1]


def test_kernels_restricts_the_pairs(on_cpu):
    layer, lines = StandIn(), []
    assert check.check_library(layer, [0, 3], seed=1, log=lines.append, only=["moegen_sm90_gemm1_b"])
    assert set(layer.calls) == {("moegen_sm90_gemm1_b", "moegen_sm90_gemm2_c"), ("moegen_sm90_gemm1_b", "moegen_sm90_gemm2_d")}
    assert lines[-1] == "moegen check: all passed (seed 1)"
    # the header says what ran, for a report from another machine
    assert lines[1].startswith("moegen ") and "nvcc V13.0.88 and CUTLASS 4.2.0; driver 580.159.04" in lines[1]
    everything = StandIn()
    assert check.check_library(everything, [3], seed=1, log=lambda m: None)
    assert {c[0] for c in everything.calls} == {"moegen_sm90_gemm1_a", "moegen_sm90_gemm1_b"}
    with pytest.raises(ValueError, match="--kernels: moegen_sm90_gemm1_z is not in this library"):
        check.check_library(StandIn(), [1], only=["moegen_sm90_gemm1_z"])


def test_a_call_still_running_is_reported(on_cpu, monkeypatch):
    monkeypatch.setattr(check, "STILL_RUNNING_SECONDS", 0.05)
    lines = []
    assert check.check_library(StandIn(first_call_seconds=0.5), [0], seed=1, log=lines.append)
    assert any(line.startswith("still running after 0 s: T=0 moegen_sm90_gemm1_a + moegen_sm90_gemm2_c") for line in lines)
    assert sum(line.startswith("still running") for line in lines) == 1  # only the slow call


@pytest.mark.parametrize("writes_all", [False, True])
def test_the_batched_entry_point_is_checked_where_the_library_takes_it(on_cpu, monkeypatch, writes_all):
    """On the router's rows grouped by expert; a row past its expert's count must stay poisoned."""
    monkeypatch.setattr(check, "batched_reference", lambda spec, w, rows, counts, fmt: torch.zeros(
        int(counts.sum()), spec.hidden_size))
    layer, lines = StandIn(batched_writes_all=writes_all), []
    assert check.check_library(layer, [0, 3], seed=1, log=lines.append) is not writes_all
    assert ("batched", 3) in layer.calls and ("batched", 0) not in layer.calls
    batched = [line for line in lines if "batched entry point" in line]
    assert len(batched) == 1 and batched[0].startswith("FAIL" if writes_all else "PASS")
    plain, lines = StandIn(), []  # a library that takes no batched calls is not asked for one
    assert check.check_library(plain, [3], seed=1, log=lines.append)
    assert not any(c[0] == "batched" for c in plain.calls) and not any("batched" in line for line in lines)


def test_a_failing_output_is_diagnosed():
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(6, 64, generator=g, dtype=torch.float64)
    ids = torch.arange(12).reshape(6, 2)
    line = check.diagnosis(ref * 2.0, ref, ids)  # every output twice its reference: an exponent off by one
    assert "output / reference scale (median over tokens) 2 = 2^1" in line
    out = ref.clone()
    out[4] += 0.5 * ref[4].norm() / 8  # token 4 wrong
    out[1, 3] = float("nan")
    line = check.diagnosis(out, ref, ids)
    assert line.startswith("NaN in 1 elements of 1 tokens (first: token 1)")
    assert "worst token 4 (experts [8, 9])" in line and "= 2^" not in line


def test_a_failing_case_prints_its_diagnosis(on_cpu, monkeypatch):
    monkeypatch.setattr(check, "reference_output", lambda spec, w, x, ids, fmt: torch.ones(x.hidden.shape[0],
                                                                                          spec.hidden_size))
    lines = []
    assert not check.check_library(StandIn(), [2], seed=1, log=lines.append, only=["moegen_sm90_gemm1_a"])
    fails = [i for i, line in enumerate(lines) if line.startswith("FAIL")]
    assert fails and all(lines[i + 1].strip().startswith("worst token") for i in fails)
