"""The lab's timing scripts' kernel picks: "T=g1tile+g2tile,..." (as tools/timeline.py takes them) to
{T: (gemm1 index, gemm2 index)} in the layer's kernel list."""


def parse_picks(layer, arg: str | None, arch: str = "sm90") -> dict[int, tuple[int, int]]:
    names = [k.name for k in layer.kernels]
    picks = {}
    for item in (arg.split(",") if arg else []):
        t, pair = item.split("=")
        g1, g2 = pair.split("+")
        picks[int(t)] = (names.index(f"moegen_{arch}_gemm1_{g1}"), names.index(f"moegen_{arch}_gemm2_{g2}"))
    return picks
