"""Which kernels a build compiles: 'default' (the shipped dispatch tables' picks for this problem on
any GPU of the arch; the arch's fallback kernels when no table covers it, and added to the picks
when a table is partial, for the token counts beyond its last bucket), 'all' (the arch's
whole config space, for tuning), 'shortlist' (the arch's tiles worth timing first: a quicker tune)
or a comma-separated list of canonical names."""
from __future__ import annotations

from .arch import get_arch
from .dispatch import SHIPPED_DIR, table_kernels
from .naming import KernelConfig, parse_kernel_name
from .problem import ProblemKey
from .spec import ModelSpec


def default_kernels(spec: ModelSpec, arch: str, shipped_root=SHIPPED_DIR) -> list[KernelConfig]:
    policy = get_arch(arch, spec.activations)
    picked, partial = table_kernels(arch, ProblemKey.of(spec), shipped_root,
                                    check=lambda c: policy.check_configs(spec, [c]))
    fallback = policy.fallback_configs(spec)
    if not picked:
        return fallback
    return sorted(set(picked) | set(fallback)) if partial else picked


def resolve_kernels(spec: ModelSpec, arch: str, kernels: str, shipped_root=SHIPPED_DIR) -> list[KernelConfig]:
    """ValueError for an unknown arch, a malformed name or a kernel of another arch."""
    policy = get_arch(arch, spec.activations)
    if kernels == "default":
        return default_kernels(spec, arch, shipped_root)
    if kernels == "all":
        return policy.candidate_configs(spec)
    if kernels == "shortlist":
        return policy.shortlist_configs(spec)
    configs = [parse_kernel_name(n.strip()) for n in kernels.split(",") if n.strip()]
    if not configs:
        raise ValueError(f"--kernels {kernels!r}: expected 'default', 'all', 'shortlist' or comma-separated kernel names")
    for c in configs:
        if c.arch != arch:
            raise ValueError(f"--kernels: {c.name} is not an {arch} kernel")
    return configs
