"""The shipped H200 dispatch tables: one for every shipped model and for the splits people deploy
(--tp 2 for the gpt-oss models, --ep-size 8 for the DeepSeek models, --ep-size 4 for Qwen3-30B-A3B;
in BF16 and W4A8), each readable, filed under its
problem's key, naming only kernels the arch accepts for that problem, and tuned at a known commit."""
import re
from pathlib import Path

import pytest

from moegen.arch import get_arch
from moegen.cli import _spec as cli_spec
from moegen.dispatch import SHIPPED_DIR, read_table, shipped_tables
from moegen.kernel_sets import default_kernels
from moegen.naming import parse_kernel_name
from moegen.problem import ProblemKey, gemm_shapes
from moegen.spec import known_models, load_model

GPU_DIR = SHIPPED_DIR / "sm90" / "nvidia-h200-132sm"
DEPLOYED = [(m, {}) for m in known_models()] + [
    ("gpt-oss-120b", dict(tp_size=2)), ("gpt-oss-20b", dict(tp_size=2)),
    ("deepseek-v3", dict(ep_size=8, ep_rank=0)), ("deepseek-v4-flash", dict(ep_size=8, ep_rank=0)),
    ("qwen3-30b-a3b", dict(ep_size=4, ep_rank=0)),
    # W4A8
    ("deepseek-v4-flash", dict(activations="fp8")), ("gpt-oss-120b", dict(activations="fp8")),
    ("gpt-oss-20b", dict(activations="fp8")), ("qwen3-30b-a3b", dict(activations="fp8")),
    ("deepseek-v3", dict(activations="fp8")), ("gpt-oss-120b", dict(tp_size=2, activations="fp8")),
    ("gpt-oss-20b", dict(tp_size=2, activations="fp8")),
    ("deepseek-v3", dict(ep_size=8, ep_rank=0, activations="fp8")),
    ("deepseek-v4-flash", dict(ep_size=8, ep_rank=0, activations="fp8")),
    ("qwen3-30b-a3b", dict(ep_size=4, ep_rank=0, activations="fp8")),
]


def _spec(model, split):
    split = dict(split)
    activations = split.pop("activations", "bf16")
    spec = load_model(model)
    return (spec.with_parallel(**split) if split else spec).with_activations(activations)


@pytest.mark.parametrize("model,split", DEPLOYED, ids=[f"{m}{''.join(f'-{k}{v}' for k, v in s.items())}"
                                                       for m, s in DEPLOYED])
def test_every_deployed_problem_has_an_h200_table(model, split):
    spec = _spec(model, split)
    key = ProblemKey.of(spec)
    path = GPU_DIR / f"{key.slug}.json"
    assert path.is_file(), f"{model} {split}: no shipped table {path}"
    table = read_table(path)
    assert table["problem_key"] == key.slug
    assert table["arch"] == "sm90" and table["gpu"] == {"name": "NVIDIA H200", "sm_count": 132}
    assert table["tuned_with"].get("commit"), f"{path}: which commit was tuned is not recorded"
    tokens = [b["tokens"] for b in table["buckets"]]
    assert tokens == sorted(set(tokens)) and tokens[0] == 1
    sm90, shapes = get_arch("sm90", spec.activations), gemm_shapes(spec)
    for b in table["buckets"]:
        for gemm in ("gemm1", "gemm2"):
            c = parse_kernel_name(b[gemm])
            assert sm90.rejection_reason(c, shapes[gemm]) is None, f"{path}: T={b['tokens']} {b[gemm]}"
            # null: compaction's pair was never timed as a pair (moegen.tune.compact)
            assert b["us"] is None or b["us"] > 0
    # The default build is the table's picks (plus the fallback where the table stops short).
    names = {k.name for k in default_kernels(spec, "sm90")}
    assert {b[g] for b in table["buckets"] for g in ("gemm1", "gemm2")} <= names
    assert len(names) <= 16, "the default build should stay small (it compiles in about a minute on 16 cores)"


def test_no_orphan_tables():
    """Every shipped table belongs to a shipped model or deployed split (a renamed spec leaves none behind)."""
    keys = {ProblemKey.of(_spec(m, s)).slug for m, s in DEPLOYED}
    for path in (SHIPPED_DIR / "sm90").glob("*/*.json"):
        assert path.stem in keys, f"{path}: no shipped model or deployed split has problem {path.stem}"
        assert path in shipped_tables("sm90", ProblemKey.parse(path.stem))


def test_the_contributors_script_tunes_every_shipped_table():
    """tools/tune_shipped.sh (README: "Tuning") retunes exactly the problems that ship a table."""
    script = (Path(__file__).resolve().parents[1] / "tools" / "tune_shipped.sh").read_text()
    listed = set()
    for line in script.split("<<'LIST'\n", 1)[1].split("\nLIST", 1)[0].splitlines():
        model, _kernels, *split = line.split()
        opts = dict(re.findall(r"--([\w-]+) (\S+)", " ".join(split)))
        spec = cli_spec(model, int(opts.get("tp", 1)), int(opts.get("ep-size", 1)), int(opts.get("ep-rank", 0)),
                        opts.get("activations", "bf16"))
        listed.add(ProblemKey.of(spec).slug)
    assert listed == {p.stem for p in GPU_DIR.glob("*.json")}
