"""Per-arch config space (moegen.arch), the problem's GEMM shapes and canonical kernel names."""
import itertools
import json
import re
from pathlib import Path

import pytest

from moegen import render
from moegen.arch import ARCHS, get_arch
from moegen.arch import sm90 as cs
from moegen.layout import SM90_ATOMS
from moegen.naming import KernelConfig, kernel_name, parse_kernel_name
from moegen.problem import GemmShape, gemm_shapes
from moegen.spec import known_models, load_model, model_from_dict

SM90 = cs.SM90
SM90_RULES = SM90.rules
SM90_DEFAULTS = cs.FALLBACK
rejection_reason = SM90.rejection_reason


def candidate_configs(spec, arch):
    return get_arch(arch).candidate_configs(spec)


def default_configs(spec, arch):
    return get_arch(arch).fallback_configs(spec)


def check_configs(spec, configs):
    SM90.check_configs(spec, configs)

MODELS = known_models()

TINY = model_from_dict({"name": "tiny", "num_experts": 8, "hidden_size": 256, "intermediate_size": 128,
                        "router": {"kind": "softmax_topk", "top_k": 2}, "activation": {"kind": "swiglu"}})


def all_specs():
    """Shipped models, a few parallel splits and a tiny model (short K loops)."""
    specs = [load_model(m) for m in MODELS]
    specs += [load_model("gpt-oss-20b").with_parallel(tp_size=2),
              load_model("qwen3-30b-a3b").with_parallel(tp_size=4, ep_size=4, ep_rank=1),
              TINY]
    return specs


def raw_space(policy=cs.SM90):
    for gemm in ("gemm1", "gemm2"):
        for values in itertools.product(*policy.axes.values()):
            yield policy.config(gemm, **dict(zip(policy.axes, values)))


# --- names ------------------------------------------------------------------------------------------------

def test_kernel_name_format():
    c = KernelConfig("sm90", "gemm1", 64, 16, 128, 6)
    assert kernel_name(c) == "moegen_sm90_gemm1_m64n16k128s6"
    assert c.name == kernel_name(c)
    assert parse_kernel_name("moegen_sm90_gemm2_m128n256k64s3") == KernelConfig("sm90", "gemm2", 128, 256, 64, 3)


@pytest.mark.parametrize("model", MODELS)
def test_candidate_names_unique_and_round_trip(model):
    configs = candidate_configs(load_model(model), "sm90")
    assert len(configs) > 10
    assert {c.gemm for c in configs} == {"gemm1", "gemm2"}
    names = [kernel_name(c) for c in configs]
    assert len(set(names)) == len(names)
    for c, n in zip(configs, names):
        assert parse_kernel_name(n) == c


def test_names_unique_over_raw_space():
    configs = list(raw_space()) + list(raw_space(cs.SM90_FP8))
    assert len({kernel_name(c) for c in configs}) == len(configs)
    assert all(parse_kernel_name(kernel_name(c)) == c for c in configs)
    assert any(c.tile_loop for c in configs)


def test_tile_loop_name():
    c = cs.SM90_FP8.config("gemm2", 128, 128, 128, 4, tile_loop=True)
    assert c.name == "moegen_sm90_gemm2_m128n128k128s4_loop_fp8" and parse_kernel_name(c.name) == c
    with pytest.raises(ValueError, match="expected the form"):
        parse_kernel_name("moegen_sm90_gemm2_m128n128k128s4_fp8_loop")  # fields out of order


def test_full_width_tile_loop_rule():
    """W4A8 only, 128+ token rows, a K loop of 7-32 tiles filling whole ring passes; the template's
    kTileLoop follows (persistent_tile_loop), and the serialization record names the loop."""
    fp8, rule = cs.SM90_FP8, cs.RULES[-2][0]
    k32, k16, k6, k56 = GemmShape(4096, 4096), GemmShape(4096, 2048), GemmShape(2048, 768), GemmShape(4096, 7168)
    ok = fp8.config("gemm1", 128, 128, 128, 4, tile_loop=True)
    for shape in (k32, k16):
        assert fp8.rejection_reason(ok, shape) is None
        assert cs.persistent_tile_loop(ok, shape)
        assert not cs.persistent_tile_loop(fp8.config("gemm1", 128, 128, 128, 4), shape)
    assert fp8.rejection_reason(fp8.config("gemm1", 128, 128, 128, 8, tile_loop=True), k16) is None
    assert fp8.rejection_reason(fp8.config("gemm1", 128, 128, 128, 6, tile_loop=True), k32) == rule  # 32 % 6
    assert fp8.rejection_reason(fp8.config("gemm1", 128, 64, 128, 4, tile_loop=True), k32) == rule  # narrow
    assert fp8.rejection_reason(ok, k6) == rule  # short K loops loop over tiles without it
    assert fp8.rejection_reason(ok, k56) == rule
    bf16 = KernelConfig("sm90", "gemm1", 128, 128, 64, 4, tile_loop=True)
    assert "tile_loop = True is not on the sm90 axis" in rejection_reason(bf16, k32)
    assert "full-width tile loop" in cs.wgmma_serialization(ok, k32)
    spec = load_model("deepseek-v4-flash").with_activations("fp8")
    # full_width_loop, step_k (W4A8 promotes per K tile: one step), tile_loop
    assert re.search(r", true, 128,\s*true>;", render.gemm_source(spec, ok))
    assert re.search(r", false, 128,\s*false>;", render.gemm_source(spec, fp8.config("gemm1", 128, 128, 128, 4)))


@pytest.mark.parametrize("bad", [
    "",
    "moegen_sm90_gemm1_m64n16k64",  # no stages
    "moegen_sm90_gemm3_m64n16k64s3",  # no such GEMM
    "moegen_sm90_gemm_m64n16k64s3",
    "sm90_gemm1_m64n16k64s3",  # prefix missing
    "moegen_sm90_gemm1_m64n16k64s3_launch",  # trailing text
    "xmoegen_sm90_gemm1_m64n16k64s3",
    "moegen_sm90_gemm1_m64n16k64s3 ",
    "moegen_gfx90_gemm1_m64n16k64s3",
    "moegen_sm90_gemm1_m-64n16k64s3",
    "moegen_sm90_gemm1_n16m64k64s3",  # fields out of order
    "MOEGEN_SM90_GEMM1_M64N16K64S3",
])
def test_malformed_names_raise(bad):
    with pytest.raises(ValueError, match="expected the form moegen_<arch>"):
        parse_kernel_name(bad)


# --- rules ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("index", range(len(SM90_RULES)), ids=[r[0][:40] for r in SM90_RULES])
def test_every_rule_is_live(index):
    """Each rule is the first to reject some config of the raw product space for some spec."""
    reason = SM90_RULES[index][0]
    hits = []
    for policy in (SM90, cs.SM90_FP8):  # the BF16 and the W4A8 family share the rules
        for spec in all_specs():
            for gemm, shape in gemm_shapes(spec).items():
                for values in itertools.product(*policy.axes.values()):
                    c = policy.config(gemm, *values)
                    if policy.rejection_reason(c, shape) == reason:
                        hits.append((policy, spec, c))
    assert hits, f"rule never fires first: {reason}"
    policy, spec, c = hits[0]
    assert c not in policy.candidate_configs(spec)


def test_rule_examples():
    k2880 = GemmShape(n=5760, k=2880)
    k4096 = GemmShape(n=4096, k=4096)
    # K = 2880 in 128-deep tiles ends half a tile in: a stepped tile's last tile holds one 64-deep step,
    # a one-step tile (m64n32k128, two consumer warpgroups) cannot end there
    assert rejection_reason(KernelConfig("sm90", "gemm1", 64, 16, 128, 4), k2880) is None
    assert rejection_reason(KernelConfig("sm90", "gemm1", 64, 32, 128, 4), k2880) == SM90_RULES[0][0]
    assert rejection_reason(KernelConfig("sm90", "gemm1", 128, 64, 128, 4), k2880) == SM90_RULES[0][0]
    assert rejection_reason(KernelConfig("sm90", "gemm1", 64, 16, 128, 4), k4096) is None
    assert rejection_reason(KernelConfig("sm90", "gemm1", 128, 256, 64, 8), k4096) == SM90_RULES[1][0]
    assert rejection_reason(KernelConfig("sm90", "gemm1", 256, 128, 128, 3), GemmShape(4096, 256)) == SM90_RULES[2][0]
    assert rejection_reason(KernelConfig("sm90", "gemm1", 64, 16, 64, 8), GemmShape(256, 128)) == SM90_RULES[3][0]
    assert rejection_reason(KernelConfig("sm90", "gemm1", 64, 16, 64, 3), k4096) == SM90_RULES[4][0]
    assert rejection_reason(KernelConfig("sm90", "gemm1", 64, 16, 64, 3), GemmShape(256, 256)) is None
    assert rejection_reason(KernelConfig("sm90", "gemm1", 128, 16, 64, 4), k4096) == SM90_RULES[5][0]
    assert rejection_reason(KernelConfig("sm90", "gemm1", 128, 64, 64, 4), k4096) is None
    # 32 token rows pay for two consumer warpgroups only at two CTAs per SM (consumers within 104
    # registers): BK = 64 (16 + 32 + 30), not BK = 128 (16 + 64 + 30)
    assert rejection_reason(KernelConfig("sm90", "gemm1", 128, 32, 64, 4), k4096) is None
    assert rejection_reason(KernelConfig("sm90", "gemm1", 128, 32, 128, 4), k4096) == SM90_RULES[5][0]
    assert rejection_reason(KernelConfig("sm90", "gemm1", 256, 64, 64, 4), k2880) == SM90_RULES[6][0]
    assert rejection_reason(KernelConfig("sm90", "gemm1", 256, 64, 64, 4), k4096) is None
    # two 64-row slices per consumer warpgroup double its accumulators and fragments: 192 registers
    # (m256n128k64, m256n64k128) compile spill-free, 256 (m256n128k128) cannot fit in 224
    assert rejection_reason(KernelConfig("sm90", "gemm1", 256, 128, 64, 4), k4096) is None
    assert rejection_reason(KernelConfig("sm90", "gemm1", 256, 64, 128, 4), k4096) is None
    assert rejection_reason(KernelConfig("sm90", "gemm1", 256, 128, 128, 3), GemmShape(4096, 256)) == SM90_RULES[2][0]
    fp8 = cs.SM90_FP8
    assert fp8.rejection_reason(fp8.config("gemm2", 256, 64, 128, 4), k4096) == SM90_RULES[-3][0]
    assert fp8.rejection_reason(fp8.config("gemm1", 256, 64, 128, 4), k4096) is None


def test_two_ctas_per_sm_and_the_rendered_register_plan():
    """The template compiles with the resource model's numbers (launch_resources): one source."""
    two = {c.name for c in raw_space() if cs.two_ctas_per_sm(c)}
    assert "moegen_sm90_gemm1_m128n64k64s4" in two and "moegen_sm90_gemm2_m128n32k64s8" in two
    assert not any("_m64n" in n for n in two)  # one consumer warpgroup: its own occupancy rule
    assert "moegen_sm90_gemm1_m128n64k128s8" not in two  # 32 + 64 + 30 = 126 registers
    assert "moegen_sm90_gemm1_m256n32k64s4" not in two  # two slices: 2 * (16 + 32) + 30 = 126
    spec = load_model("deepseek-v4-flash")
    for cfg, plan in ((KernelConfig("sm90", "gemm1", 128, 64, 64, 4), (2, 32, 104)),
                      (KernelConfig("sm90", "gemm1", 256, 128, 64, 4), (1, 56, 224)),
                      (KernelConfig("sm90", "gemm1", 64, 8, 128, 6), (6, 0, 0)),  # 65536 // 160 // (4 + 32 + 30)
                      (KernelConfig("sm90", "gemm2", 64, 256, 64, 3), (1, 0, 0))):
        r = cs.launch_resources(cfg)
        assert (r["min_blocks_per_sm"], r["producer_registers"], r["consumer_registers"]) == plan
        text = render.gemm_source(spec, cfg)
        assert f"TileShape<{cfg.block_m}, {cfg.block_n}, {cfg.block_k}, {cfg.stages}, {plan[0]},\n" in text
        assert f"{plan[1]}, {plan[2]}, false, {r['step_k']}," in text


def test_layout_padding():
    assert SM90_ATOMS.padded(10, 2880) == (128, 2880)
    assert SM90_ATOMS.padded(5760, 1440) == (5760, 1472)
    assert SM90_ATOMS.padded(4096, 65) == (4096, 128)
    assert SM90_ATOMS.shapes(3, 4096, 2048) == {"w": (3, 64, 32, 2048), "scales": (3, 64, 32, 128),
                                                "expert_scale": (3,)}


def test_gemm_shapes_follow_parallel_split():
    s = load_model("gpt-oss-20b").with_parallel(tp_size=2)
    assert gemm_shapes(s) == {"gemm1": GemmShape(2880, 2880), "gemm2": GemmShape(2880, 1440)}


@pytest.mark.parametrize("model", MODELS)
def test_candidates_are_exactly_the_valid_raw_configs(model):
    spec = load_model(model)
    shapes = gemm_shapes(spec)
    valid = [c for c in raw_space() if rejection_reason(c, shapes[c.gemm]) is None]
    assert candidate_configs(spec, "sm90") == valid
    assert len(valid) < len(list(raw_space()))


def test_unknown_arch_is_a_clear_error():
    with pytest.raises(ValueError, match="arch 'sm75': expected one of sm90"):
        get_arch("sm75")
    assert set(ARCHS) >= {"sm90"}


def test_off_axis_configs_are_rejected_with_the_axis():
    shape = GemmShape(4096, 4096)
    assert "block_n = 24 is not on the sm90 axis" in rejection_reason(KernelConfig("sm90", "gemm1", 64, 24, 64, 4), shape)
    assert "stages = 12" in rejection_reason(KernelConfig("sm90", "gemm1", 64, 8, 64, 12), shape)


# --- defaults ---------------------------------------------------------------------------------------------

def default_specs():
    return [load_model(m) for m in MODELS] + [load_model("gpt-oss-20b").with_parallel(tp_size=2),
                                             load_model("qwen3-30b-a3b").with_parallel(ep_size=4, ep_rank=1),
                                             load_model("deepseek-v3").with_parallel(tp_size=4)]


@pytest.mark.parametrize("spec", default_specs(), ids=lambda s: s.variant)
def test_default_configs(spec):
    configs = default_configs(spec, "sm90")
    assert len(configs) == 2 * len(SM90_DEFAULTS)
    shapes = gemm_shapes(spec)
    for gemm in ("gemm1", "gemm2"):
        mine = [c for c in configs if c.gemm == gemm]
        assert len(mine) == len(SM90_DEFAULTS)
        tiles = [(c.block_m, c.block_n, c.block_k, c.stages) for c in mine]
        for tile, choices in zip(tiles, SM90_DEFAULTS.values()):
            assert tile in {tuple(x) for x in choices}
        for c in mine:
            assert c.arch == "sm90"
            assert rejection_reason(c, shapes[gemm]) is None
            assert c in candidate_configs(spec, "sm90")


def test_default_configs_prefer_the_first_choice():
    configs = default_configs(load_model("deepseek-v4-flash"), "sm90")  # K = 4096, 2048: 128 divides both
    assert [c.name for c in configs] == [f"moegen_sm90_{g}_{t}" for g in ("gemm1", "gemm2")
                                         for t in ("m64n8k128s4", "m64n32k128s4", "m128n128k128s4")]


@pytest.mark.parametrize("spec", [load_model("gpt-oss-20b"), load_model("gpt-oss-120b"),
                                  load_model("gpt-oss-20b").with_parallel(tp_size=2)], ids=lambda s: s.variant)
def test_gpt_oss_gets_block_k_128_only_in_steps(spec):
    # K = 2880 (and 1440, padded to 1472) is not a multiple of 128: only tiles that issue a 128-deep K
    # tile in 64-deep steps can end the K loop half a tile in
    for configs in (default_configs(spec, "sm90"), candidate_configs(spec, "sm90")):
        assert all(c.block_k == 64 or cs.step_k(c) == 64 for c in configs)
    k128 = [c for c in candidate_configs(spec, "sm90") if c.block_k == 128]
    assert k128 and all(c.block_m == 64 for c in k128)
    # ...while a model whose K is a multiple of 128 gets one-step block_k=128 tiles too.
    assert any(c.block_k == 128 and cs.step_k(c) == 128 for c in candidate_configs(load_model("deepseek-v3"), "sm90"))


def test_check_configs_names_the_kernel():
    spec = load_model("gpt-oss-120b")
    bad = KernelConfig("sm90", "gemm1", 128, 64, 128, 6)
    good = default_configs(spec, "sm90")
    with pytest.raises(ValueError) as excinfo:
        check_configs(spec, good + [bad])
    with pytest.raises(ValueError, match="not an sm90 kernel"):
        check_configs(spec, [KernelConfig("sm100", "gemm1", 64, 16, 64, 3)])
    msg = str(excinfo.value)
    assert "moegen_sm90_gemm1_m128n64k128s6" in msg
    assert "gpt-oss-120b" in msg
    assert SM90_RULES[0][0] in msg
    check_configs(spec, good)  # no raise


# Short K loops (DeepSeek TP8: K = 256, Qwen3 TP4: K = 192) still get a full default set.
@pytest.mark.parametrize("model, tp", [("deepseek-v3", 8), ("qwen3-30b-a3b", 4)])
def test_default_configs_exist_for_common_tp_splits(model, tp):
    spec = load_model(model).with_parallel(tp_size=tp)
    assert len(default_configs(spec, "sm90")) == 2 * len(SM90_DEFAULTS)


# --- SM100 ---------------------------------------------------------------------------------------------

from moegen.arch import sm100 as b100  # noqa: E402

SPLITS = [dict(), dict(tp_size=2), dict(ep_size=8, ep_rank=3)]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("split", SPLITS, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()) or "full")
def test_sm100_space_and_fallback_for_every_model_and_split(model, split):
    spec = load_model(model)
    spec = spec.with_parallel(**split) if split else spec  # every shipped model takes these splits
    space = b100.SM100.candidate_configs(spec)
    assert len(space) >= 10 and {c.gemm for c in space} == {"gemm1", "gemm2"}
    fallback = b100.SM100.fallback_configs(spec)
    assert len(fallback) == 6 and all(c in space for c in fallback)
    for c in space:
        assert c.stages == 0 and parse_kernel_name(c.name) == c and c.name.endswith("s0")


def test_sm100_rules_are_live():
    raw = [KernelConfig("sm100", "gemm1", m, n, k, 0) for m, n, k, _, _ in itertools.product(*b100.AXES.values())]
    shape = GemmShape(4096, 4096)
    reasons = {b100.SM100.rejection_reason(c, shape) for c in raw}
    assert {r[0] for r in b100.RULES[1:]} <= reasons  # smem and 2-SM rules fire on the raw space
    assert b100.SM100.rejection_reason(KernelConfig("sm100", "gemm1", 128, 64, 256, 0), GemmShape(256, 128)) == \
        b100.RULES[0][0]
    assert "stages = 4 is not on the sm100 axis" in b100.SM100.rejection_reason(
        KernelConfig("sm100", "gemm1", 128, 64, 128, 4), shape)


def test_sm100_units_depend_on_the_tile_only():
    """The SM100 GEMM takes its shapes at run time: one object per tile serves every model."""
    cfg = KernelConfig("sm100", "gemm2", 256, 128, 128, 0)
    texts = {render.gemm_source(load_model(m), cfg) for m in MODELS}
    assert len(texts) == 1
    text = texts.pop()
    assert "GroupedGemm<256, 128, 128>" in text and "moegen_sm100_gemm2_m256n128k128s0_launch" in text


def test_wgmma_serialization_record_matches_ptxas():
    """The config space's record of where ptxas serializes the wgmmas (sm90.SERIALIZED_WGMMA_TILES and
    the persistent tile loop) against ptxas's verdicts (tests/data/sm90_wgmma_serialized.json, from
    builds' resources), at the occupancy those kernels were compiled with: every serialized kernel has
    its recorded cause, and every kernel without a tile loop is serialized exactly when recorded (ptxas
    keeps some tile loops unserialized, so those may go either way)."""
    data = json.loads((Path(__file__).parent / "data" / "sm90_wgmma_serialized.json").read_text())
    assert len(data["kernels"]) >= 200
    serialized = tile_loops = 0
    for key, (blocks, verdict) in data["kernels"].items():
        model, name = key.split("/")
        cfg = parse_kernel_name(name)
        shape = gemm_shapes(load_model(model))[cfg.gemm]
        assert cs.launch_resources(cfg)["min_blocks_per_sm"] == blocks, f"{key}: re-measure the record"
        reason = cs.wgmma_serialization(cfg, shape)
        if cs.persistent_tile_loop(cfg, shape) and (cfg.block_m, cfg.block_n, cs.step_k(cfg)) not in cs.SERIALIZED_WGMMA_TILES:
            tile_loops += 1
            assert reason is not None and "tile loop" in reason, key
        else:
            assert (reason is not None) == verdict, key
        serialized += verdict
    assert serialized > 0 and tile_loops > 0


def test_serialization_note():
    from moegen.arch import serialization_note
    assert serialization_note("moegen_sm90_gemm1_m64n32k64s4") == \
        "expected: 5 CTAs per SM leave a consumer thread 80 registers; at 4 ptxas keeps two wgmma batches in flight with 74"
    assert serialization_note("moegen_sm90_gemm2_m128n64k64s6").startswith("NOT EXPECTED")
    qwen3 = gemm_shapes(load_model("qwen3-30b-a3b"))  # GEMM2's K = 768: 12 K tiles of 64, a tile loop at s6
    assert serialization_note("moegen_sm90_gemm2_m128n64k64s6", qwen3) == \
        "expected: the persistent grid's tile loop (12 K tiles, at most 12); kept for short K loops, where it was faster"
    assert serialization_note("moegen_sm90_gemm2_m128n64k64s8", qwen3).startswith("NOT EXPECTED")  # 12 % 8: no loop
    assert serialization_note("layer") == "not a GEMM kernel"


def test_persistent_tile_loop_rule_and_its_rendering():
    """sm90.persistent_tile_loop decides the template's kTileLoop: the kernel gets what the rule says."""
    from moegen.render import gemm_source
    qwen3_spec = load_model("qwen3-30b-a3b")
    for name, loops in (("moegen_sm90_gemm2_m64n8k64s6", True), ("moegen_sm90_gemm2_m64n8k64s8", False)):
        text = gemm_source(qwen3_spec, parse_kernel_name(name))
        assert re.search(r"TileShape<[^>]*,\s*(true|false)>;", text)[1] == ("true" if loops else "false"), name
    qwen3 = gemm_shapes(qwen3_spec)["gemm2"]  # K = 768
    assert cs.persistent_tile_loop(parse_kernel_name("moegen_sm90_gemm2_m64n8k64s6"), qwen3)  # 12 tiles
    assert cs.persistent_tile_loop(parse_kernel_name("moegen_sm90_gemm2_m64n8k128s6"), qwen3)  # 6 tiles
    assert not cs.persistent_tile_loop(parse_kernel_name("moegen_sm90_gemm2_m64n8k64s8"), qwen3)  # 12 % 8
    dsv4 = gemm_shapes(load_model("deepseek-v4-flash"))["gemm2"]  # K = 2048: 32 tiles of 64
    assert not cs.persistent_tile_loop(parse_kernel_name("moegen_sm90_gemm2_m64n8k64s8"), dsv4)
    # W4A8 loops over tiles up to 6 K tiles: Qwen3's GEMM2 (6 of 128), not gpt-oss-20b --tp 2's (12)
    assert cs.persistent_tile_loop(parse_kernel_name("moegen_sm90_gemm2_m128n128k128s6_fp8"), qwen3)
    oss_tp2 = gemm_shapes(load_model("gpt-oss-20b").with_parallel(tp_size=2))["gemm2"]
    assert not cs.persistent_tile_loop(parse_kernel_name("moegen_sm90_gemm2_m128n128k128s4_fp8"), oss_tp2)


# --- W4A8 (e4m3 activations) --------------------------------------------------------------------------

def test_w4a8_names_round_trip_and_differ_from_bf16():
    from moegen.naming import KernelConfig, parse_kernel_name
    c = KernelConfig("sm90", "gemm1", 64, 16, 128, 6, fp8=True)
    assert c.name == "moegen_sm90_gemm1_m64n16k128s6_fp8"
    assert parse_kernel_name(c.name) == c
    assert parse_kernel_name("moegen_sm90_gemm1_m64n16k128s6") != c


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "gpt-oss-120b", "qwen3-30b-a3b"])
def test_w4a8_space_is_its_own_family(model):
    spec = load_model(model).with_activations("fp8")
    fp8 = get_arch("sm90", "fp8")
    space = fp8.candidate_configs(spec)
    assert space and all(c.fp8 and c.block_k == 128 for c in space)  # one promotion interval: batch invariance
    assert all(c.fp8 for c in fp8.fallback_configs(spec)) and len(fp8.fallback_configs(spec)) >= 2
    # the bf16 policy refuses fp8 configs and the other way round, naming why
    bf16_cfg = get_arch("sm90").fallback_configs(load_model(model))[0]
    assert "activations" in fp8.rejection_reason(bf16_cfg, gemm_shapes(spec)[bf16_cfg.gemm])
    assert "activations" in get_arch("sm90").rejection_reason(space[0], gemm_shapes(spec)[space[0].gemm])


def test_w4a8_accumulators_count_twice_in_the_register_model():
    from moegen.arch import sm90
    from moegen.naming import KernelConfig
    bf16, fp8 = KernelConfig("sm90", "gemm1", 256, 128, 128, 6), KernelConfig("sm90", "gemm1", 256, 128, 128, 6, fp8=True)
    assert sm90.accumulator_registers(fp8) == 2 * sm90.accumulator_registers(bf16)
    assert sm90.a_fragment_registers(fp8) * 2 == sm90.a_fragment_registers(bf16)  # k32 steps: half the registers


def test_w4a8_on_sm100_is_a_clear_error():
    with pytest.raises(ValueError, match="sm90"):
        get_arch("sm100", "fp8")


def test_problem_keys_of_w4a8_are_their_own():
    from moegen.problem import ProblemKey
    key = ProblemKey.of(load_model("gpt-oss-120b").with_activations("fp8"))
    assert key.slug.endswith("-fp8") and ProblemKey.parse(key.slug) == key
    assert ProblemKey.parse(ProblemKey.of(load_model("gpt-oss-120b")).slug) != key


def test_consumer_step_k():
    """BF16 tiles with one consumer warpgroup widen a 128-deep K tile in two 64-deep steps (half the A
    fragments, more CTAs per SM), unless that occupancy serializes the wgmmas; W4A8 promotes once per K
    tile, so it steps the whole tile."""
    bf16 = KernelConfig("sm90", "gemm1", 64, 8, 128, 4)
    assert cs.step_k(bf16) == 64 and cs.a_fragment_registers(bf16) == 32
    assert cs.launch_resources(bf16)["min_blocks_per_sm"] == 6  # 65536 // 160 // (4 + 32 + 30)
    assert cs.step_k(KernelConfig("sm90", "gemm1", 256, 128, 64, 8)) == 64
    assert cs.step_k(KernelConfig("sm90", "gemm1", 64, 32, 128, 4)) == 128  # stepped, it would serialize
    assert cs.step_k(KernelConfig("sm90", "gemm1", 128, 64, 128, 4)) == 128  # two consumer warpgroups
    assert cs.step_k(KernelConfig("sm90", "gemm1", 64, 8, 128, 4, fp8=True)) == 128
    # gpt-oss's K = 2880: 22 whole 128-deep tiles and a last one of one 64-deep step
    assert cs.k_tiles(bf16, GemmShape(5760, 2880)) == 23 and cs.k_loop_ends_on_a_step(bf16, GemmShape(5760, 2880))
    # --tp 2's GEMM2, K = 1440 (padded to 1472): 12 K tiles, the last half full; such loops run one CTA per
    # tile, so the stage counts whose ring passes would make the persistent tile loop are pruned
    k1440 = GemmShape(2880, 1440)
    assert rejection_reason(KernelConfig("sm90", "gemm2", 64, 8, 128, 4), k1440) == cs.RULES[-1][0]
    assert rejection_reason(KernelConfig("sm90", "gemm2", 64, 8, 128, 6), k1440) == cs.RULES[-1][0]
    assert rejection_reason(KernelConfig("sm90", "gemm2", 64, 8, 128, 8), k1440) is None
    assert rejection_reason(KernelConfig("sm90", "gemm2", 64, 8, 64, 6), GemmShape(2048, 768)) is None  # whole tiles loop


def test_a_layer_no_fallback_fits_names_the_fields_and_the_reason():
    tiny = model_from_dict(dict(TINY.to_dict(), hidden_size=32, intermediate_size=32, activations="fp8"), "xtiny.yaml")
    with pytest.raises(ValueError, match=r"^xtiny.yaml: no decode gemm1 kernel of sm90 fits this layer \(gemm1 N=64, "
                                         r"K=32; the last tried, moegen_sm90_gemm1_\w+: prefetch distance.*"
                                         r"expected a larger hidden_size or intermediate_size"):
        get_arch("sm90", "fp8").fallback_configs(tiny)
