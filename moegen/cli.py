"""moegen command line: build (and list) MoE layer libraries."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .spec import SpecError, known_models, load_model

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "generated"


@click.group()
def main() -> None:
    """moegen: ahead-of-time compiler for MXFP4 Mixture-of-Experts layers."""


@main.command()
@click.option("--model", required=True, help="model name under configs/models, or a path to a YAML spec")
@click.option("--arch", required=True, type=click.Choice(["sm90", "sm100"]), help="target GPU architecture")
@click.option("--tp", "tp_size", type=int, default=None, help="tensor-parallel degree (splits the intermediate size)")
@click.option("--ep-size", type=int, default=None, help="expert-parallel degree")
@click.option("--ep-rank", type=int, default=None, help="this rank's expert-parallel index")
@click.option("--kernels", default="default", show_default=True,
              help="'default' (one decode and one prefill kernel per GEMM), 'all' (the whole tuning space), "
                   "or comma-separated kernel names")
@click.option("--jobs", "-j", type=int, default=None, help="parallel nvcc processes (default: CPU count)")
@click.option("--out", "out_root", type=click.Path(path_type=Path), default=DEFAULT_OUT, show_default=True)
def build(model, arch, tp_size, ep_size, ep_rank, kernels, jobs, out_root) -> None:
    """Render, compile and link the layer for MODEL into OUT/<variant>/<arch>/."""
    from .build import BuildError, build as run
    from .config_space import candidate_configs, default_configs
    from .naming import parse_kernel_name
    try:
        spec = load_model(model)
        if tp_size is not None or ep_size is not None or ep_rank is not None:
            spec = spec.with_parallel(tp_size, ep_size, ep_rank)
        if kernels == "default":
            configs = default_configs(spec, arch)
        elif kernels == "all":
            configs = candidate_configs(spec, arch)
        else:
            configs = [parse_kernel_name(n.strip()) for n in kernels.split(",") if n.strip()]
            bad = [c.name for c in configs if c.arch != arch]
            if bad:
                raise click.BadParameter(f"{bad[0]}: not an {arch} kernel", param_hint="--kernels")
        result = run(spec, arch, configs, out_root, jobs=jobs, log=lambda m: click.echo(m, err=True))
    except (SpecError, BuildError, NotImplementedError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    click.echo(str(result.plan.out_dir))


@main.command()
@click.option("--model", required=True, help="model name under configs/models, or a path to a YAML spec")
@click.option("--arch", default="sm90", show_default=True, type=click.Choice(["sm90"]))
@click.option("--tokens", default="1,4,16,64,256,1024,4096,16384", show_default=True,
              help="comma-separated token counts")
@click.option("--reps", type=int, default=30, show_default=True, help="replays per input set")
@click.option("--json", "json_out", type=click.Path(path_type=Path), default=None, help="write results as JSON")
@click.option("--out", "out_root", type=click.Path(path_type=Path), default=DEFAULT_OUT, show_default=True)
def bench(model, arch, tokens, reps, json_out, out_root) -> None:
    """Time the built layer (CUDA-graph replay, median) against the measured floor."""
    import json

    from .bench import bench_layer, markdown_table, measure_ceilings, to_json
    from .runtime import LoadError, load
    try:
        spec = load_model(model)
        layer = load(out_root / spec.variant / arch, spec=spec)
    except (SpecError, LoadError) as e:
        raise click.ClickException(str(e)) from None
    ceilings = measure_ceilings()
    click.echo(f"measured ceilings: {ceilings.read_tbs:.2f} TB/s read, {ceilings.bf16_tflops:.0f} bf16 TFLOP/s")
    rows = bench_layer(layer, [int(t) for t in tokens.split(",")], ceilings, reps=reps)
    click.echo(markdown_table(rows))
    if json_out:
        from .build import atomic_write
        atomic_write(json_out, json.dumps(to_json(rows, ceilings, spec), indent=2) + "\n")


@main.command()
@click.option("--model", required=True, help="model name under configs/models, or a path to a YAML spec")
@click.option("--arch", default="sm90", show_default=True, type=click.Choice(["sm90"]))
@click.option("--buckets", default=",".join(str(b) for b in (1 << i for i in range(15))), show_default=True,
              help="comma-separated token-count buckets")
@click.option("--no-build", is_flag=True, help="tune the library already built (default: build the whole space first)")
@click.option("--jobs", "-j", type=int, default=None, help="parallel nvcc processes for the build")
@click.option("--out", "out_root", type=click.Path(path_type=Path), default=DEFAULT_OUT, show_default=True)
def tune(model, arch, buckets, no_build, jobs, out_root) -> None:
    """Time every kernel of the library per token-count bucket on this GPU; write its dispatch table."""
    from .bench import LayerProfiler
    from .build import BuildError, build as run_build
    from .config_space import candidate_configs
    from .runtime import LoadError, load
    from .tune import TuneError, make_table, save_table, search
    try:
        spec = load_model(model)
        if not no_build:
            run_build(spec, arch, candidate_configs(spec, arch), out_root, jobs=jobs,
                      log=lambda m: click.echo(m, err=True))
        layer = load(out_root / spec.variant / arch, spec=spec)
        click.echo(f"tuning {len(layer.kernels)} kernels of {spec.variant} on {layer.gpu.name}", err=True)
        choices, measurements = search(layer.kernels, spec, LayerProfiler(layer),
                                       [int(b) for b in buckets.split(",")], log=lambda m: click.echo(m, err=True))
        table = make_table(spec, arch, layer.manifest["fingerprint"], layer.gpu, layer.kernels, choices, measurements)
        click.echo(str(save_table(layer.out_dir, table)))
    except (SpecError, BuildError, LoadError, TuneError) as e:
        raise click.ClickException(str(e)) from None


@main.command("list")
def list_models() -> None:
    """List the model specs under configs/models."""
    for name in known_models():
        s = load_model(name)
        click.echo(f"{name}: {s.num_experts} experts, top-{s.top_k}, hidden {s.hidden_size}, "
                   f"intermediate {s.intermediate_size}, router {s.router.kind}, activation {s.activation.kind}")


if __name__ == "__main__":
    sys.exit(main())
