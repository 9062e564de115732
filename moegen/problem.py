"""The problem a layer solves, apart from how it is solved (DeepGEMM's split): the two grouped GEMMs'
shapes and the key dispatch tables are filed under.  Ground floor: spec only."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .spec import ModelSpec


@dataclass(frozen=True)
class GemmShape:
    """The N (output rows) and K of one of the layer's two grouped GEMMs."""
    n: int
    k: int


def max_tokens(spec: ModelSpec) -> int:
    """Tokens per call: the kernels index expert rows (tokens x top_k) and finalize's 8-element vectors
    (tokens x hidden / 8) with 32-bit integers; half the range keeps every sum of them in range too.
    The layer's kMaxTokens, which asserts that it equals this."""
    return (2**31 - 1) // 2 // max(spec.top_k, spec.hidden_size // 8)


def gemm_shapes(spec: ModelSpec) -> dict[str, GemmShape]:
    return {"gemm1": GemmShape(2 * spec.local_intermediate, spec.hidden_size),
            "gemm2": GemmShape(spec.hidden_size, spec.local_intermediate)}


@dataclass(frozen=True)
class ProblemKey:
    """What decides a kernel choice besides the GPU: the GEMM shapes (hidden, local intermediate),
    the local experts, and how many rows an expert receives (tokens x top_k over all experts).
    Router, activation and biases do not change which tile wins; the EP rank does not either (every
    rank of a split gets one table).  Models with one key share a table."""
    num_experts: int
    local_experts: int
    top_k: int
    hidden: int
    intermediate: int  # per tensor-parallel rank
    fp8: bool = False  # W4A8 (the spec's activations): its kernels are another family

    @classmethod
    def of(cls, spec: ModelSpec) -> "ProblemKey":
        return cls(spec.num_experts, spec.local_experts, spec.top_k, spec.hidden_size, spec.local_intermediate,
                   spec.activations == "fp8")

    @property
    def slug(self) -> str:
        suffix = "-fp8" if self.fp8 else ""
        return f"e{self.num_experts}-l{self.local_experts}-k{self.top_k}-h{self.hidden}-i{self.intermediate}{suffix}"

    @classmethod
    def parse(cls, slug: str) -> "ProblemKey":
        m = re.fullmatch(r"e(\d+)-l(\d+)-k(\d+)-h(\d+)-i(\d+)(-fp8)?", slug)
        if not m:
            raise ValueError(f"problem key {slug!r}: expected e<experts>-l<local>-k<top_k>-h<hidden>-i<intermediate>[-fp8]")
        return cls(*(int(x) for x in m.groups()[:5]), fp8=bool(m.group(6)))


def rows_per_expert(spec: ModelSpec, tokens: int) -> float:
    """Average rows an expert receives: T * top_k / E over all experts (expert parallelism does not
    change it, each rank just owns fewer experts)."""
    return tokens * spec.top_k / spec.num_experts
