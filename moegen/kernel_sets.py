"""Which kernels a build compiles: 'default' (the shipped dispatch tables' picks for this problem on
any GPU of the arch; the arch's fallback kernels when no table covers it, and added to the picks
when a table is partial, for the token counts beyond its last bucket; and the picks of the user's
own tables under the output root, which `moegen tune` wrote), 'all' (the arch's
whole config space, for tuning), 'shortlist' (the arch's tiles worth timing first: a quicker tune)
or a comma-separated list of canonical names."""
from __future__ import annotations

import warnings

from .arch import get_arch
from .dispatch import SHIPPED_DIR, DispatchError, shipped_tables, table_kernels, table_picks
from .naming import KernelConfig, parse_kernel_name
from .problem import ProblemKey
from .spec import ModelSpec


def default_kernels(spec: ModelSpec, arch: str, shipped_root=SHIPPED_DIR, user_root=None) -> list[KernelConfig]:
    """user_root: the user's tables (`<out>/dispatch`), which the runtime consults before the shipped ones."""
    policy = get_arch(arch, spec.activations)
    problem, check = ProblemKey.of(spec), (lambda c: policy.check_configs(spec, [c]))
    picked, partial = table_kernels(arch, problem, shipped_root, check=check)
    fallback = policy.fallback_configs(spec)
    if not picked:
        kernels = fallback
    else:
        kernels = sorted(set(picked) | set(fallback)) if partial else picked
    tuned = set()
    for path in shipped_tables(arch, problem, user_root) if user_root is not None else []:
        try:
            tuned |= table_picks(path, check)[0]
        except DispatchError as e:  # the runtime passes over such a table too
            warnings.warn(f"{e}; its picks are not built (tune again, or delete the table)", RuntimeWarning)
    # beyond a partial user table the shipped table answers, and the kernels above cover it
    return sorted(set(kernels) | {parse_kernel_name(n) for n in tuned}) if tuned else kernels


def resolve_kernels(spec: ModelSpec, arch: str, kernels: str, shipped_root=SHIPPED_DIR,
                    user_root=None) -> list[KernelConfig]:
    """ValueError for an unknown arch, a malformed name or a kernel of another arch."""
    policy = get_arch(arch, spec.activations)
    if kernels == "default":
        return default_kernels(spec, arch, shipped_root, user_root)
    if kernels == "all":
        return policy.candidate_configs(spec)
    if kernels == "shortlist":
        return policy.shortlist_configs(spec)
    try:
        configs = [parse_kernel_name(n.strip()) for n in kernels.split(",") if n.strip()]
    except ValueError as e:
        raise ValueError(f"--kernels: {e}, or one of 'default', 'all', 'shortlist'") from None
    if not configs:
        raise ValueError(f"--kernels {kernels!r}: expected 'default', 'all', 'shortlist' or comma-separated kernel names")
    for c in configs:
        if c.arch != arch:
            raise ValueError(f"--kernels: {c.name} is not an {arch} kernel")
    return configs
