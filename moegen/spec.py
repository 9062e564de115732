"""Model and hardware specs: YAML files validated once into frozen dataclasses.

Every validation failure raises SpecError naming the file, the field, the bad value and
what was expected.  Nothing downstream re-validates: a ModelSpec that exists is valid.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"

ROUTER_KINDS = ("sigmoid_group_topk", "softmax_topk", "topk_softmax")
GROUP_SCORES = ("max", "top2_sum")
ACTIVATION_KINDS = ("swiglu", "swiglu_oai")
ARCHS = ("sm90", "sm100")

# MXFP4 scales cover 32 consecutive K elements; every GEMM K (hidden, local intermediate) must hold whole groups.
MX_GROUP = 32


class SpecError(ValueError):
    """A spec file or field is invalid; the message names file, field, value and expectation."""


def _fail(source: str, field: str, value: Any, expected: str) -> None:
    raise SpecError(f"{source}: field '{field}' = {value!r}: expected {expected}")


@dataclass(frozen=True)
class RouterSpec:
    kind: str  # one of ROUTER_KINDS
    top_k: int
    n_group: int = 1  # expert groups (sigmoid_group_topk)
    topk_group: int = 1  # groups kept per token
    group_score: str = "max"  # how a group is scored from its experts' biased scores
    score_bias: bool = False  # per-expert correction bias added for selection only
    renormalize: bool = True  # divide the chosen weights by their sum
    routed_scaling_factor: float = 1.0


@dataclass(frozen=True)
class ActivationSpec:
    kind: str  # "swiglu": silu(g)*u ; "swiglu_oai": g*sigmoid(alpha*g)*(u+1)
    limit: float | None = None  # gate clamped above, up clamped to [-limit, limit]
    alpha: float = 1.0  # only for swiglu_oai


@dataclass(frozen=True)
class ParallelSpec:
    tp_size: int = 1  # tensor parallel: splits the intermediate size
    ep_size: int = 1  # expert parallel: splits the experts into ep_size contiguous ranges
    ep_rank: int = 0


@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_experts: int
    hidden_size: int
    intermediate_size: int
    router: RouterSpec
    activation: ActivationSpec
    gemm1_bias: bool = False  # per-expert bias on the W1|W3 outputs (gpt-oss)
    gemm2_bias: bool = False  # per-expert bias on the W2 output (gpt-oss)
    parallel: ParallelSpec = ParallelSpec()
    source: str = "<inline>"

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.parallel.ep_size

    @property
    def expert_begin(self) -> int:
        return self.parallel.ep_rank * self.local_experts

    @property
    def local_intermediate(self) -> int:
        return self.intermediate_size // self.parallel.tp_size

    @property
    def top_k(self) -> int:
        return self.router.top_k

    @property
    def variant(self) -> str:
        """Directory name for this model and parallel split (``name`` when unsplit)."""
        p = self.parallel
        s = self.name
        if p.tp_size > 1:
            s += f"-tp{p.tp_size}"
        if p.ep_size > 1:
            s += f"-ep{p.ep_rank}of{p.ep_size}"
        return s

    def with_parallel(self, tp_size: int | None = None, ep_size: int | None = None,
                      ep_rank: int | None = None) -> "ModelSpec":
        p = self.parallel
        new = ParallelSpec(tp_size=p.tp_size if tp_size is None else tp_size,
                           ep_size=p.ep_size if ep_size is None else ep_size,
                           ep_rank=p.ep_rank if ep_rank is None else ep_rank)
        spec = dataclasses.replace(self, parallel=new)
        _validate_model(spec, f"{self.source} (parallel override)")
        return spec

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("source")
        return d


@dataclass(frozen=True)
class GpuSpec:
    name: str
    arch: str  # "sm90" | "sm100"
    compute_capability: tuple[int, int]
    sm_count: int
    smem_per_block_kib: int  # opt-in dynamic shared memory per block
    hbm_bandwidth_tbs: float  # datasheet; benchmarks measure their own
    bf16_dense_tflops: float
    source: str = "<inline>"


# --- field readers -------------------------------------------------------------------------

class _Fields:
    """Reads a mapping field by field, remembering which keys were used to reject unknown ones."""

    def __init__(self, data: Any, source: str, prefix: str = ""):
        if not isinstance(data, Mapping):
            _fail(source, prefix.rstrip(".") or "<top level>", data, "a mapping")
        self.data, self.source, self.prefix, self.used = data, source, prefix, set()

    def _get(self, key, default, required):
        self.used.add(key)
        if key not in self.data:
            if required:
                _fail(self.source, self.prefix + key, None, "a value (field is required)")
            return default
        return self.data[key]

    def int(self, key, default=None, *, required=False, min_value=None):
        v = self._get(key, default, required)
        if isinstance(v, bool) or not isinstance(v, int):
            _fail(self.source, self.prefix + key, v, "an integer")
        if min_value is not None and v < min_value:
            _fail(self.source, self.prefix + key, v, f"an integer >= {min_value}")
        return v

    def float(self, key, default=None, *, required=False, allow_none=False, positive=False):
        v = self._get(key, default, required)
        if v is None and allow_none:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            _fail(self.source, self.prefix + key, v, "a number" + (" or null" if allow_none else ""))
        if not math.isfinite(v):
            _fail(self.source, self.prefix + key, v, "a finite number")
        if positive and not v > 0:
            _fail(self.source, self.prefix + key, v, "a number > 0")
        return float(v)

    def bool(self, key, default=None, *, required=False):
        v = self._get(key, default, required)
        if not isinstance(v, bool):
            _fail(self.source, self.prefix + key, v, "true or false")
        return v

    def choice(self, key, choices, default=None, *, required=False):
        v = self._get(key, default, required)
        if v not in choices:
            _fail(self.source, self.prefix + key, v, "one of " + ", ".join(map(repr, choices)))
        return v

    def str(self, key, default=None, *, required=False):
        v = self._get(key, default, required)
        if not isinstance(v, str) or not v:
            _fail(self.source, self.prefix + key, v, "a non-empty string")
        return v

    def sub(self, key, *, required=False):
        v = self._get(key, {}, required)
        return _Fields(v, self.source, self.prefix + key + ".")

    def done(self):
        extra = sorted((k for k in self.data if k not in self.used), key=str)
        if extra:
            _fail(self.source, self.prefix + str(extra[0]), self.data[extra[0]],
                  "no such field (known: " + ", ".join(sorted(self.used)) + ")")


def model_from_dict(data: Any, source: str = "<inline>") -> ModelSpec:
    f = _Fields(data, source)
    r = f.sub("router", required=True)
    router = RouterSpec(
        kind=r.choice("kind", ROUTER_KINDS, required=True),
        top_k=r.int("top_k", required=True, min_value=1),
        n_group=r.int("n_group", 1, min_value=1),
        topk_group=r.int("topk_group", 1, min_value=1),
        group_score=r.choice("group_score", GROUP_SCORES, "max"),
        score_bias=r.bool("score_bias", False),
        renormalize=r.bool("renormalize", True),
        routed_scaling_factor=r.float("routed_scaling_factor", 1.0, positive=True),
    )
    r.done()
    a = f.sub("activation", required=True)
    activation = ActivationSpec(
        kind=a.choice("kind", ACTIVATION_KINDS, required=True),
        limit=a.float("limit", None, allow_none=True, positive=True),
        alpha=a.float("alpha", 1.0, positive=True),
    )
    a.done()
    b = f.sub("bias")
    g1b, g2b = b.bool("gemm1", False), b.bool("gemm2", False)
    b.done()
    p = f.sub("parallel")
    parallel = ParallelSpec(tp_size=p.int("tp_size", 1, min_value=1),
                            ep_size=p.int("ep_size", 1, min_value=1),
                            ep_rank=p.int("ep_rank", 0, min_value=0))
    p.done()
    spec = ModelSpec(
        name=f.str("name", required=True),
        num_experts=f.int("num_experts", required=True, min_value=1),
        hidden_size=f.int("hidden_size", required=True, min_value=1),
        intermediate_size=f.int("intermediate_size", required=True, min_value=1),
        router=router, activation=activation, gemm1_bias=g1b, gemm2_bias=g2b,
        parallel=parallel, source=source,
    )
    f.done()
    _validate_model(spec, source)
    return spec


def _validate_model(s: ModelSpec, source: str) -> None:
    r, p = s.router, s.parallel
    for key, v, lo in (("tp_size", p.tp_size, 1), ("ep_size", p.ep_size, 1), ("ep_rank", p.ep_rank, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            _fail(source, f"parallel.{key}", v, f"an integer >= {lo}")
    # The routing kernel holds one token's scores in a warp: 32 lanes x 32 values.
    if s.num_experts > 1024:
        _fail(source, "num_experts", s.num_experts, "at most 1024 (routing keeps one token's scores in a warp)")
    if r.top_k > min(s.num_experts, 32):
        _fail(source, "router.top_k", r.top_k, f"at most min(num_experts, 32) = {min(s.num_experts, 32)}")
    if s.hidden_size % MX_GROUP:
        _fail(source, "hidden_size", s.hidden_size, f"a multiple of {MX_GROUP} (MXFP4 scale group along K)")
    if s.intermediate_size % MX_GROUP:
        _fail(source, "intermediate_size", s.intermediate_size, f"a multiple of {MX_GROUP}")
    if r.kind == "sigmoid_group_topk":
        if s.num_experts % r.n_group:
            _fail(source, "router.n_group", r.n_group, f"a divisor of num_experts ({s.num_experts})")
        if r.n_group > 32:
            _fail(source, "router.n_group", r.n_group, "at most 32")
        if not 1 <= r.topk_group <= r.n_group:
            _fail(source, "router.topk_group", r.topk_group, f"between 1 and n_group ({r.n_group})")
        if r.topk_group * (s.num_experts // r.n_group) < r.top_k:
            _fail(source, "router.topk_group", r.topk_group,
                  f"enough groups to hold top_k={r.top_k} experts")
        if r.group_score == "top2_sum" and s.num_experts // r.n_group < 2:
            _fail(source, "router.group_score", r.group_score, "'max' when groups have one expert")
    else:
        if r.n_group != 1:
            _fail(source, "router.n_group", r.n_group, f"1 (grouping needs kind sigmoid_group_topk, not {r.kind})")
        if r.topk_group != 1:
            _fail(source, "router.topk_group", r.topk_group,
                  f"1 (grouping needs kind sigmoid_group_topk, not {r.kind})")
        if r.score_bias:
            _fail(source, "router.score_bias", True, f"false (score bias needs kind sigmoid_group_topk)")
    if s.activation.kind == "swiglu" and s.activation.alpha != 1.0:
        _fail(source, "activation.alpha", s.activation.alpha, "1.0 (alpha only applies to swiglu_oai)")
    if s.num_experts % p.ep_size:
        _fail(source, "parallel.ep_size", p.ep_size, f"a divisor of num_experts ({s.num_experts})")
    if not p.ep_rank < p.ep_size:
        _fail(source, "parallel.ep_rank", p.ep_rank, f"less than ep_size ({p.ep_size})")
    if s.intermediate_size % p.tp_size:
        _fail(source, "parallel.tp_size", p.tp_size, f"a divisor of intermediate_size ({s.intermediate_size})")
    if (s.intermediate_size // p.tp_size) % MX_GROUP:
        _fail(source, "parallel.tp_size", p.tp_size,
              f"a split leaving a multiple of {MX_GROUP} intermediate columns per rank "
              f"({s.intermediate_size}/{p.tp_size} = {s.intermediate_size / p.tp_size:g})")


def gpu_from_dict(data: Any, source: str = "<inline>") -> GpuSpec:
    f = _Fields(data, source)
    cc = f._get("compute_capability", None, True)
    if not (isinstance(cc, list) and len(cc) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in cc)):
        _fail(source, "compute_capability", cc, "a list [major, minor] of two integers")
    spec = GpuSpec(
        name=f.str("name", required=True),
        arch=f.choice("arch", ARCHS, required=True),
        compute_capability=(cc[0], cc[1]),
        sm_count=f.int("sm_count", required=True, min_value=1),
        smem_per_block_kib=f.int("smem_per_block_kib", required=True, min_value=1),
        hbm_bandwidth_tbs=f.float("hbm_bandwidth_tbs", required=True, positive=True),
        bf16_dense_tflops=f.float("bf16_dense_tflops", required=True, positive=True),
        source=source,
    )
    f.done()
    expected_cc = {"sm90": (9, 0), "sm100": (10, 0)}[spec.arch]
    if spec.compute_capability != expected_cc:
        _fail(source, "compute_capability", list(cc), f"{list(expected_cc)} for arch {spec.arch}")
    return spec


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecError(f"{path}: cannot read: {e.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None


def _resolve(kind: str, name_or_path: str | Path, config_dir: Path) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml"):
        return p
    candidate = config_dir / kind / f"{name_or_path}.yaml"
    if not candidate.exists():
        known = sorted(x.stem for x in (config_dir / kind).glob("*.yaml"))
        raise SpecError(f"{candidate}: no {kind[:-1]} named {str(name_or_path)!r} (known: {', '.join(known)})")
    return candidate


def load_model(name_or_path: str | Path, config_dir: Path = CONFIG_DIR) -> ModelSpec:
    path = _resolve("models", name_or_path, config_dir)
    spec = model_from_dict(_read_yaml(path), str(path))
    if path.parent == config_dir / "models" and spec.name != path.stem:
        _fail(str(path), "name", spec.name, f"{path.stem!r} (the file's name)")
    return spec


def load_gpu(name_or_path: str | Path, config_dir: Path = CONFIG_DIR) -> GpuSpec:
    path = _resolve("hardware", name_or_path, config_dir)
    return gpu_from_dict(_read_yaml(path), str(path))


def known_models(config_dir: Path = CONFIG_DIR) -> list[str]:
    return sorted(p.stem for p in (config_dir / "models").glob("*.yaml"))


def known_gpus(config_dir: Path = CONFIG_DIR) -> list[str]:
    return sorted(p.stem for p in (config_dir / "hardware").glob("*.yaml"))
