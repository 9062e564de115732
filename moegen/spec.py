"""Model specs: YAML files validated once into frozen dataclasses.

Every validation failure raises SpecError naming the file, the field, the bad value and what was
expected.  Nothing downstream re-validates: a ModelSpec that exists is valid.  ``to_dict`` writes
the same schema ``model_from_dict`` reads, so a spec round-trips through a manifest unchanged.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import itertools
import math
import os
import re
import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from .paths import CONFIG_DIR, read_small_file


ROUTER_KINDS = ("sigmoid_group_topk", "sqrtsoftplus_topk", "softmax_topk", "topk_softmax")
SCORE_BIAS_ROUTERS = ("sigmoid_group_topk", "sqrtsoftplus_topk")  # selection on score + per-expert bias
GROUP_SCORES = ("max", "top2_sum")
ACTIVATION_KINDS = ("swiglu", "swiglu_oai")
# The GEMMs' activation operands: "bf16" (SM90's W4A16; SM100 quantizes to MXFP8, its only mode) or
# "fp8" (SM90's W4A8: e4m3 per token, opt-in).
ACTIVATION_PRECISIONS = ("bf16", "fp8")

# MXFP4 scales cover 32 consecutive K elements; every GEMM K (hidden, local intermediate) must hold whole groups.
MX_GROUP = 32
# Routing keeps one token's scores in a warp's registers: 32 lanes x 32 values, and one lane per choice.
MAX_EXPERTS = 1024
MAX_TOP_K = 32
# One expert's prepared W1|W3 (2 I x H e2m1 values) stays at or under 1 GiB, inside the 32-bit offsets
# of prepare's index arithmetic and the kernels' per-expert atom counts.
MAX_HIDDEN = 32768
MAX_INTERMEDIATE = 32768
# Names become directory and C++ identifier parts: lower-case letters, digits, '.', '_' and '-',
# starting with a letter or digit, no '..' (so never a parent directory, '/', a newline or an absolute path).
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
NAME_RULE = "1-64 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit, without '..'"


def is_name(text: Any) -> bool:
    return isinstance(text, str) and NAME_PATTERN.fullmatch(text) is not None and ".." not in text


_validating = contextvars.ContextVar("moegen_spec_validating", default=False)


@contextlib.contextmanager
def _validated_here():
    """ModelSpecs built inside skip __post_init__'s check: the caller validates them itself."""
    token = _validating.set(True)
    try:
        yield
    finally:
        _validating.reset(token)


class SpecError(ValueError):
    """A spec file or field is invalid; the message names file, field, value and expectation."""


class _BoundedRepr(reprlib.Repr):
    """A repr whose work is bounded, not only its text: YAML aliases make a file of a kilobyte a
    value of billions of elements, which a full repr would build before cutting it."""

    def __init__(self):
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother, self.maxlong = 3, 60, 60, 60
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = self.maxfrozenset = 6

    def repr_int(self, x, level):  # repr of a huge int is slow, or refused
        return f"<an integer of {x.bit_length()} bits>" if x.bit_length() > 64 else super().repr_int(x, level)

    def repr_dict(self, x, level):  # in the file's order: reprlib's own sorts the keys
        if not x or level <= 0:
            return "{...}" if x else "{}"
        items = [f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}"
                 for k, v in itertools.islice(x.items(), self.maxdict)]
        return "{" + ", ".join(items + (["..."] if len(x) > self.maxdict else [])) + "}"


_BOUNDED_REPR = _BoundedRepr()


def shown(value: Any, limit: int = 80) -> str:
    """repr(value), cut to one short line: an error quotes the bad value, not a whole file."""
    if not isinstance(value, str):
        text = _BOUNDED_REPR.repr(value)
        return text if len(text) <= limit else f"{text[:limit - 3]}..."
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 12]}... ({len(text)} chars)"


def _fail(source: str, field: str, value: Any, expected: str) -> None:
    raise SpecError(f"{source}: field '{field}' = {shown(value)}: expected {expected}")


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
    # The model's first `hash_layers` MoE layers route by token id (DeepSeek-V4's tid2eid table)
    # instead of the gate: serve them with MoeLayer.experts and moegen.routing.hash_route.
    hash_layers: int = 0


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
    activations: str = "bf16"  # one of ACTIVATION_PRECISIONS
    source: str = "<inline>"

    def __post_init__(self):
        """Built any way (the constructor, dataclasses.replace), a ModelSpec is validated as a file is:
        its schema goes through model_from_dict once."""
        if _validating.get():
            return
        for field, kind in (("router", RouterSpec), ("activation", ActivationSpec), ("parallel", ParallelSpec)):
            if not isinstance(getattr(self, field), kind):
                _fail(self.source, field, getattr(self, field), f"a moegen.spec.{kind.__name__}")
        model_from_dict(self.to_dict(), self.source)

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.parallel.ep_size

    @property
    def expert_begin(self) -> int:
        return self.parallel.ep_rank * self.local_experts

    @property
    def local_intermediate(self) -> int:
        """Intermediate columns per TP rank: whole 32-wide MX groups (a scale group of GEMM2's K never
        straddles two ranks), so where intermediate_size / tp_size is not a multiple of 32 the last
        columns of the last rank are zero padding (tp_slice), as other engines pad gpt-oss at TP 4 and 8."""
        return -(-self.intermediate_size // (self.parallel.tp_size * MX_GROUP)) * MX_GROUP

    def tp_slice(self, tp_rank: int) -> tuple[int, int]:
        """The columns [c0, c1) of intermediate_size that TP rank tp_rank holds; its local_intermediate
        - (c1 - c0) columns after them are zero (weights, scales and biases)."""
        if isinstance(tp_rank, bool) or not isinstance(tp_rank, int) or not 0 <= tp_rank < self.parallel.tp_size:
            raise ValueError(f"tp_rank: {shown(tp_rank)}, expected 0..{self.parallel.tp_size - 1} (the spec's tp_size)")
        c0 = tp_rank * self.local_intermediate
        return c0, min(c0 + self.local_intermediate, self.intermediate_size)

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
        if self.activations == "fp8":
            s += "-w4a8"
        return s

    def with_activations(self, activations: str) -> "ModelSpec":
        if activations not in ACTIVATION_PRECISIONS:
            _fail(self.source, "activations", activations, "one of " + ", ".join(map(repr, ACTIVATION_PRECISIONS)))
        return dataclasses.replace(self, activations=activations)

    def with_parallel(self, tp_size: int | None = None, ep_size: int | None = None,
                      ep_rank: int | None = None) -> "ModelSpec":
        p = self.parallel
        new = ParallelSpec(tp_size=p.tp_size if tp_size is None else tp_size,
                           ep_size=p.ep_size if ep_size is None else ep_size,
                           ep_rank=p.ep_rank if ep_rank is None else ep_rank)
        with _validated_here():  # below, naming the split as the source
            spec = dataclasses.replace(self, parallel=new)
        _validate_model(spec, f"{self.source} (parallel split)")
        return spec

    def to_dict(self) -> dict:
        """The YAML schema (what model_from_dict reads), with every field written out."""
        return {"name": self.name, "num_experts": self.num_experts, "hidden_size": self.hidden_size,
                "intermediate_size": self.intermediate_size, "router": dataclasses.asdict(self.router),
                "activation": dataclasses.asdict(self.activation),
                "bias": {"gemm1": self.gemm1_bias, "gemm2": self.gemm2_bias},
                "parallel": dataclasses.asdict(self.parallel), "activations": self.activations}


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

    def int(self, key, default=None, *, required=False, min_value=None, max_value=None):
        v = self._get(key, default, required)
        if isinstance(v, bool) or not isinstance(v, int):
            _fail(self.source, self.prefix + key, v, "an integer")
        if min_value is not None and v < min_value:
            _fail(self.source, self.prefix + key, v, f"an integer >= {min_value}")
        if max_value is not None and v > max_value:
            _fail(self.source, self.prefix + key, v, f"an integer <= {max_value}")
        return v

    def float(self, key, default=None, *, required=False, allow_none=False, positive=False):
        v = self._get(key, default, required)
        if v is None and allow_none:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            _fail(self.source, self.prefix + key, v, "a number" + (" or null" if allow_none else ""))
        if isinstance(v, int) and abs(v) > 1 << 64 or not math.isfinite(v):
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
        if not isinstance(v, str) or v not in choices:
            _fail(self.source, self.prefix + key, v, "one of " + ", ".join(map(repr, choices)))
        return v

    def name(self, key, *, required=False):
        v = self._get(key, None, required)
        if not is_name(v):
            _fail(self.source, self.prefix + key, v, f"a name of {NAME_RULE}")
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
        top_k=r.int("top_k", required=True, min_value=1, max_value=MAX_TOP_K),
        n_group=r.int("n_group", 1, min_value=1, max_value=32),
        topk_group=r.int("topk_group", 1, min_value=1, max_value=32),
        group_score=r.choice("group_score", GROUP_SCORES, "max"),
        score_bias=r.bool("score_bias", False),
        renormalize=r.bool("renormalize", True),
        routed_scaling_factor=r.float("routed_scaling_factor", 1.0, positive=True),
        hash_layers=r.int("hash_layers", 0, min_value=0, max_value=1 << 16),
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
    parallel = ParallelSpec(tp_size=p.int("tp_size", 1, min_value=1, max_value=MAX_INTERMEDIATE),
                            ep_size=p.int("ep_size", 1, min_value=1, max_value=MAX_EXPERTS),
                            ep_rank=p.int("ep_rank", 0, min_value=0, max_value=MAX_EXPERTS))
    p.done()
    with _validated_here():  # validated below, once
        spec = ModelSpec(
            name=f.name("name", required=True),
            num_experts=f.int("num_experts", required=True, min_value=1, max_value=MAX_EXPERTS),
            hidden_size=f.int("hidden_size", required=True, min_value=MX_GROUP, max_value=MAX_HIDDEN),
            intermediate_size=f.int("intermediate_size", required=True, min_value=MX_GROUP, max_value=MAX_INTERMEDIATE),
            router=router, activation=activation, gemm1_bias=g1b, gemm2_bias=g2b,
            parallel=parallel, activations=f.choice("activations", ACTIVATION_PRECISIONS, "bf16"), source=source,
        )
    f.done()
    _validate_model(spec, source)
    return spec


def _validate_model(s: ModelSpec, source: str) -> None:
    r, p = s.router, s.parallel
    for key, v, lo in (("tp_size", p.tp_size, 1), ("ep_size", p.ep_size, 1), ("ep_rank", p.ep_rank, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            _fail(source, f"parallel.{key}", v, f"an integer >= {lo}")
    if r.top_k > min(s.num_experts, MAX_TOP_K):
        _fail(source, "router.top_k", r.top_k, f"at most min(num_experts, {MAX_TOP_K}) = {min(s.num_experts, MAX_TOP_K)}")
    if s.hidden_size % MX_GROUP:
        _fail(source, "hidden_size", s.hidden_size, f"a multiple of {MX_GROUP} (MXFP4 scale group along K)")
    if s.intermediate_size % MX_GROUP:
        _fail(source, "intermediate_size", s.intermediate_size, f"a multiple of {MX_GROUP}")
    if r.kind == "sigmoid_group_topk":
        if s.num_experts % r.n_group:
            _fail(source, "router.n_group", r.n_group, f"a divisor of num_experts ({s.num_experts})")
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
    if r.score_bias and r.kind not in SCORE_BIAS_ROUTERS:
        _fail(source, "router.score_bias", True, f"false (a score bias needs kind {' or '.join(SCORE_BIAS_ROUTERS)})")
    if s.activation.kind == "swiglu" and s.activation.alpha != 1.0:
        _fail(source, "activation.alpha", s.activation.alpha, "1.0 (alpha only applies to swiglu_oai)")
    if s.num_experts % p.ep_size:
        _fail(source, "parallel.ep_size", p.ep_size, f"a divisor of num_experts ({s.num_experts})")
    if not p.ep_rank < p.ep_size:
        _fail(source, "parallel.ep_rank", p.ep_rank, f"less than ep_size ({p.ep_size})")
    if (p.tp_size - 1) * s.local_intermediate >= s.intermediate_size:  # ranks take whole 32-groups
        _fail(source, "parallel.tp_size", p.tp_size,
              f"a split leaving every rank some of the {s.intermediate_size // MX_GROUP} groups of {MX_GROUP} "
              f"intermediate columns (at {s.local_intermediate} columns per rank the last rank would hold none)")


# --- files ---------------------------------------------------------------------------------

class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (plain YAML keeps the last), and reads
    plain scalars by YAML 1.2's core schema: YAML 1.1's `48:00` (2880), `0x20`, `2_880`, `yes` and dates
    are strings, which the spec's checks then refuse, rather than numbers or booleans nobody meant."""


_YAML11_ONLY = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
                "tag:yaml.org,2002:timestamp"}
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _YAML11_ONLY]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                       list("tTfF"))
_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))


def _decimal_int(loader, node) -> int:
    """Decimal (YAML 1.1 reads `010` as octal 8).  Past int()'s 4300 digits, an integer of about that
    size, so that the field's own check refuses it by name."""
    text = loader.construct_scalar(node)
    if len(text.lstrip("+-")) > 4000:
        return (-1 if text.startswith("-") else 1) << int(len(text) * 3.33)
    return int(text, 10)


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _decimal_int)
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+.0123456789"))


def _check_unique_keys(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool) -> None:
    # A mapping is checked once, before PyYAML flattens its merges into it (after which a merged key and
    # the key overriding it both stand in it); an anchored one merged later was checked where it stands.
    checked = loader.__dict__.setdefault("_checked_mappings", set())
    merging = loader.__dict__.setdefault("_merging_mappings", set())
    if id(node) in checked:
        return
    checked.add(id(node))
    seen, merges = set(), 0
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` or an inline mapping: checked as one
            merges += 1
            if merges > 1:
                raise yaml.constructor.ConstructorError(None, None, "'<<' given twice", key_node.start_mark)
            merging.add(id(node))
            for merged in (value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]):
                if isinstance(merged, yaml.MappingNode):
                    _check_unique_keys(loader, merged, deep)
                    if id(merged) in merging:  # PyYAML flattens it in place and then merges it wrongly
                        raise yaml.constructor.ConstructorError(
                            None, None, "a merged mapping merges another ('<<' in '<<'), expected one level of "
                            "merging", key_node.start_mark)
            continue
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise yaml.constructor.ConstructorError(None, None, f"a key is a {type(key).__name__}, expected a name",
                                                    key_node.start_mark)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice", key_node.start_mark)
        seen.add(key)


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
    """A mapping whose keys are unique; construct_mapping then applies merges, its own keys overriding."""
    _check_unique_keys(loader, node, deep)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def read_yaml(path: Path) -> Any:
    """The YAML document at path; any failure is a SpecError naming the file."""
    try:
        raw = read_small_file(path, 1 << 20)
    except ValueError as e:  # an embedded NUL byte
        raise SpecError(f"{shown(str(path))}: cannot read: {e}") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a directory, expected a YAML file") from None
    except OSError as e:
        raise SpecError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not UTF-8 text (byte {e.start}: {raw[e.start:e.start + 1]!r})") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {_one_line(e)}") from None
    except ValueError as e:  # a value YAML cannot build, e.g. an integer of over 4300 digits
        raise SpecError(f"{path}: not a valid spec value: {shown(str(e))}") from None
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply, expected a spec (a mapping of a few levels)") from None


def _resolve(name_or_path: str | Path, config_dir: Path) -> Path:
    p, text = Path(name_or_path), os.fspath(name_or_path)
    if p.suffix.lower() in (".yaml", ".yml") or "/" in text or os.sep in text:
        return p
    candidate = Path(config_dir) / "models" / f"{name_or_path}.yaml"
    if not NAME_PATTERN.fullmatch(str(name_or_path)) or not candidate.is_file():
        if p.is_file():  # a spec file in this directory, whatever its suffix
            return p
        known = ", ".join(known_models(config_dir))
        raise SpecError(f"{Path(config_dir) / 'models'}: no model named {shown(str(name_or_path))} (known: {known}; "
                        "or give the path of a .yaml/.yml spec)")
    return candidate


def load_model(name_or_path: str | Path, config_dir: Path = CONFIG_DIR) -> ModelSpec:
    if not isinstance(name_or_path, (str, os.PathLike)) or not os.fspath(name_or_path):
        raise SpecError(f"model = {shown(name_or_path)}: expected a model name ({', '.join(known_models(config_dir))}) "
                        "or the path of a .yaml spec")
    path = _resolve(name_or_path, config_dir)
    spec = model_from_dict(read_yaml(path), str(path))
    if path.parent == Path(config_dir) / "models" and spec.name != path.stem:
        _fail(str(path), "name", spec.name, f"{path.stem!r} (the file's name)")
    return spec


def known_models(config_dir: Path = CONFIG_DIR) -> list[str]:
    """The model names under config_dir/models: files named <name>.yaml with a valid name."""
    return sorted(p.stem for p in (Path(config_dir) / "models").glob("*.yaml")
                  if p.is_file() and NAME_PATTERN.fullmatch(p.stem))
