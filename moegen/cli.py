"""moegen command line: build, list, spec, tune, bench, check, sass, clean.

Every failure a user can cause is one line on stderr ("Error: <file or option>: <what>, expected
<what>") and a non-zero exit, never a traceback.
"""
from __future__ import annotations

import functools
import math
import os
import re
import signal
import sys
import threading
import warnings
from pathlib import Path

import click

from .paths import DEFAULT_OUT, blocking_file, unwritable_dir
from .spec import NAME_PATTERN, NAME_RULE, SpecError, is_name, known_models, load_model, shown

ARCH_CHOICES = ["sm90", "sm100"]


def _one_line_errors(fn):
    """Turn the package's error types (and OS errors) into click's one-line 'Error: ...' exit."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from .artifact import ArtifactError
        from .build import BuildError
        from .dispatch import DispatchError
        errors = (SpecError, BuildError, ArtifactError, DispatchError, ValueError, OSError, RuntimeError)
        try:
            return fn(*args, **kwargs)
        except click.ClickException:
            raise
        except errors as e:
            if os.environ.get("MOEGEN_TRACEBACK"):  # for debugging moegen itself
                raise
            text = (isinstance(e, OSError) and (_stdout_failure(e) or _os_error_line(e))) or " ".join(str(e).split())
            raise click.ClickException(text or type(e).__name__) from None
    return wrapper


def _os_error_line(e: OSError) -> str | None:
    """'<path>: <reason>' for an OSError about a path, the path cut short (a name too long is one of them)."""
    if not e.strerror or e.filename is None:
        return None
    name = os.fsdecode(e.filename) if isinstance(e.filename, (str, bytes)) else str(e.filename)
    return f"{shown(name)}: {e.strerror}"


def _stdout_failure(e: OSError) -> str | None:
    """The error line for an OSError that writing standard output raised (a full disk, a closed pipe),
    else None.  Every line the CLI prints goes through click.echo, whose frame names the stream."""
    tb = e.__traceback__
    while tb is not None and not (tb.tb_frame.f_globals.get("__name__") == "click.utils"
                                  and tb.tb_frame.f_code.co_name == "echo"):
        tb = tb.tb_next
    if tb is None or tb.tb_frame.f_locals.get("file") is not sys.stdout:
        return None
    try:  # the unwritten rest goes nowhere; Python's own flush at exit would print a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return f"cannot write to standard output: {e.strerror or e}"


def _manifest_activations(out_dir: Path) -> str:
    from .artifact import read_manifest
    return read_manifest(out_dir).spec.get("activations", "bf16")


class _FiniteFloat(click.ParamType):
    """A finite float within [low, high] (click's FloatRange lets nan and inf through)."""
    name = "float"

    def __init__(self, low: float, high: float):
        self.low, self.high = low, high

    def convert(self, value, param, ctx):
        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r}: expected a number", param, ctx)
        if not (math.isfinite(v) and self.low <= v <= self.high):
            self.fail(f"{value!r}: expected a number in [{self.low:g}, {self.high:g}]", param, ctx)
        return v


_SECONDS = _FiniteFloat(0, 3600)


class _PathArg(click.Path):
    """A path option: an empty string is refused (it would mean the current directory)."""

    def __init__(self):
        super().__init__(path_type=Path)

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail(f"{value!r}: expected a path", param, ctx)
        return super().convert(value, param, ctx)


def _writable_file_target(option: str, path: Path | None) -> None:
    """Fail before the work, not after it, where the result could not be written."""
    if path is None:
        return
    if path.is_dir():
        raise click.BadParameter(f"{path}: is a directory, expected a file path", param_hint=option)
    blocker = blocking_file(path)
    if blocker is not None:
        raise click.BadParameter(f"{path}: {blocker} is not a directory, expected a file path", param_hint=option)
    locked = unwritable_dir(path)
    if locked is not None:
        raise click.BadParameter(f"{path}: {locked} is not writable, expected a directory this user may write",
                                 param_hint=option)


def _writable_dir_target(option: str, path: Path | None) -> None:
    if path is None:
        return
    blocker = blocking_file(path, include_self=True)
    if blocker is not None:
        raise click.BadParameter(f"{path}: {blocker} is not a directory, expected a directory", param_hint=option)
    locked = unwritable_dir(path, include_self=True)
    if locked is not None:
        raise click.BadParameter(f"{path}: {locked} is not writable, expected a directory this user may write",
                                 param_hint=option)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except (OSError, RuntimeError):  # a name too long, a loop: not the same file; the write reports it
        return False


def _token_counts(option: str, text: str, spec, minimum: int = 0) -> list[int]:
    """Token counts for the spec's layer: at most the tokens one call takes (moegen.problem.max_tokens)."""
    from .problem import max_tokens
    parts = [t.strip() for t in text.split(",") if t.strip()]
    # int() alone also takes '1_0' and non-ASCII digits, and refuses more than 4300 digits in its own words
    if not all(re.fullmatch(r"-?[0-9]+", t) for t in parts):
        raise click.BadParameter(f"{shown(text)}: expected comma-separated integers", param_hint=option)
    values = [int(t) if len(t) <= 19 else (-math.inf if t[0] == "-" else math.inf) for t in parts]
    most = max_tokens(spec)
    if not values or any(v < minimum or v > most for v in values):
        raise click.BadParameter(f"{shown(text)}: expected comma-separated integers from {minimum} to {most} "
                                 f"(the tokens one call of {spec.variant} takes)", param_hint=option)
    return values


def _spec(model: str, tp_size=None, ep_size=None, ep_rank=None, activations=None):
    spec = load_model(model)
    if tp_size is not None or ep_size is not None or ep_rank is not None:
        spec = spec.with_parallel(tp_size, ep_size, ep_rank)
    if activations is not None:
        spec = spec.with_activations(activations)
    return spec


_model_option = click.option("--model", required=True, help="model name under configs/models, or a path to a YAML spec")
_out_option = click.option("--out", "out_root", type=_PathArg(), default=DEFAULT_OUT, show_default=True,
                           help="output root: builds go to OUT/<variant>/<arch>, objects to OUT/.objects")
_split_options = [click.option("--tp", "tp_size", type=click.IntRange(min=1), default=None,
                               help="tensor-parallel degree (splits the intermediate size)"),
                  click.option("--ep-size", type=click.IntRange(min=1), default=None, help="expert-parallel degree"),
                  click.option("--ep-rank", type=click.IntRange(min=0), default=None,
                               help="this rank's expert-parallel index"),
                  click.option("--activations", type=click.Choice(["bf16", "fp8"]), default=None,
                               help="the GEMMs' activations (default: the spec's): fp8 is W4A8, e4m3 per token "
                                    "(sm90)")]


def _with_split(fn):
    for opt in reversed(_split_options):
        fn = opt(fn)
    return fn


_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2


class _OneLineGroup(click.Group):
    """Usage errors (a bad option value, a missing option) as one 'Error: ...' line too, exit 2, without
    click's usage block; `--help` shows the usage."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        with warnings.catch_warnings():  # this run's warnings one line each; the caller's hook back after
            warnings.showwarning = _one_line_warning
            self._standalone(*args, **kwargs)

    def _standalone(self, *args, **kwargs):
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except _NO_ARGS_IS_HELP as e:  # `moegen` alone: the help, as click prints it
            click.echo(e.ctx.get_help() if e.ctx is not None else e.format_message(), err=True)
            sys.exit(e.exit_code)
        except click.UsageError as e:
            command = f"{e.ctx.command_path}: " if e.ctx is not None else ""
            click.echo(f"Error: {command}{' '.join(e.format_message().split())}", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except OSError as e:  # from click's own output (--help) or a command's, to a full disk or closed pipe
            message = _stdout_failure(e)
            if message is None:
                raise
            click.echo(f"Error: {message}", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as the user reads it: one line, without the source line that raised it."""
    click.echo(f"Warning: {' '.join(str(message).split())}", err=True)


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # SIGTERM ends a run as Ctrl-C does: running compiles stopped, "Aborted!"


@click.group(cls=_OneLineGroup)
def main() -> None:
    """moegen: ahead-of-time compiler for MXFP4 Mixture-of-Experts layers.

    \b
    First time on a GPU:  moegen build --model deepseek-v4-flash --arch sm90
                          moegen check --model deepseek-v4-flash
    On a B200 (SM100 is compile-verified only): build with --arch sm100 --kernels all, run
    moegen check --model deepseek-v4-flash --arch sm100, and report its output (README, "Blackwell").
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


@main.command()
@_model_option
@click.option("--arch", required=True, type=click.Choice(ARCH_CHOICES), help="target GPU architecture")
@_with_split
@click.option("--kernels", default="default", show_default=True,
              help="'default' (the kernels the shipped dispatch tables pick, and your tables under OUT/dispatch), "
                   "'all' (the whole tuning space), 'shortlist' (the tiles worth timing first), or comma-separated "
                   "kernel names")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="parallel nvcc processes (default: CPU count)")
@_out_option
@click.option("--objects", "store", type=_PathArg(), default=None,
              help="the object store to share (default: OUT/.objects)")
@_one_line_errors
def build(model, arch, tp_size, ep_size, ep_rank, activations, kernels, jobs, out_root, store) -> None:
    """Render, compile and link the layer for MODEL into OUT/<variant>/<arch>/."""
    from .build import build as run
    from .dispatch import user_dir
    from .kernel_sets import resolve_kernels
    spec = _spec(model, tp_size, ep_size, ep_rank, activations)
    configs = resolve_kernels(spec, arch, kernels, user_root=user_dir(out_root))
    result = run(spec, arch, configs, out_root, jobs=jobs, log=lambda m: click.echo(m, err=True), store=store)
    click.echo(str(result.plan.out_dir))


@main.command("list")
def list_models() -> None:
    """List the model specs under configs/models (a broken file is reported, the others still listed)."""
    from .paths import CONFIG_DIR
    broken = [f"{p}: the file name {p.stem!r} is not a model name, expected lower-case letters, digits, '.', '_' "
              "or '-' (rename it)" for p in sorted((CONFIG_DIR / "models").glob("*.yaml"))
              if p.is_file() and not NAME_PATTERN.fullmatch(p.stem)]
    for name in known_models():
        try:
            s = load_model(name)
        except SpecError as e:
            broken.append(" ".join(str(e).split()))
            continue
        click.echo(f"{name}: {s.num_experts} experts, top-{s.top_k}, hidden {s.hidden_size}, "
                   f"intermediate {s.intermediate_size}, router {s.router.kind}, activation {s.activation.kind}")
    for line in broken:
        click.echo(f"Error: {line}", err=True)
    if broken:
        sys.exit(1)


@main.command()
@_model_option
@click.option("--arch", default="sm90", show_default=True, type=click.Choice(ARCH_CHOICES))
@_with_split
@click.option("--buckets", default=",".join(str(b) for b in (1 << i for i in range(15))), show_default=True,
              help="comma-separated token-count buckets; a table of this GPU and problem already under the "
                   "table root keeps the buckets not listed (a tune resumed or extended; under OUT/dispatch "
                   "only if this library has its picks, under --table-root always)")
@click.option("--kernels", default=None,
              help="the candidates: 'all' (the default), 'shortlist' (a quicker tune), 'default' or kernel names; "
                   "with --no-build, the library's own kernels unless given")
@click.option("--no-build", is_flag=True, help="tune the library already built (default: build the candidates first)")
@click.option("--tolerance", type=_FiniteFloat(0, 0.5), default=0.01, show_default=True,
              help="compaction: per GEMM, keep the fewest kernels within this of each bucket's best")
@click.option("--table-root", type=_PathArg(), default=None,
              help="write the table under this root (configs/dispatch to contribute it) instead of OUT/dispatch")
@click.option("--warm-seconds", type=_SECONDS, default=1.0, show_default=True,
              help="per bucket, back-to-back replays before timing: the clock and power the GPU serves at")
@click.option("--settle-seconds", type=_SECONDS, default=0.25, show_default=True,
              help="each candidate's own replays, untimed, right before its timing: capture and verification "
                   "idle the GPU, which then boosts above the power-capped clock it serves at")
@click.option("--min-seconds", type=_SECONDS, default=0.1, show_default=True,
              help="each candidate's back-to-back replays last at least this long")
@click.option("--reps", type=click.IntRange(min=1), default=6, show_default=True,
              help="each candidate's replay rounds over its input sets, at least")
@click.option("--rotations", type=click.IntRange(min=1), default=4, show_default=True,
              help="input sets per bucket (different tokens, so different experts)")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="parallel nvcc processes for the build")
@_out_option
@_one_line_errors
def tune(model, arch, tp_size, ep_size, ep_rank, activations, buckets, kernels, no_build, tolerance, table_root, warm_seconds,
         settle_seconds, min_seconds, reps, rotations, jobs, out_root) -> None:
    """Time the kernels per token-count bucket on this GPU; write its dispatch table."""
    import torch

    from .dispatch import user_dir
    from .kernel_sets import resolve_kernels
    from .tune import tune_model
    _writable_dir_target("--table-root", table_root)
    spec = _spec(model, tp_size, ep_size, ep_rank, activations)
    bucket_list = _token_counts("--buckets", buckets, spec, minimum=1)
    configs = None if kernels is None and no_build else resolve_kernels(
        spec, arch, "all" if kernels is None else kernels, user_root=table_root or user_dir(out_root))
    if not torch.cuda.is_available():
        raise click.ClickException("no CUDA GPU visible to PyTorch: `moegen tune` times kernels on the GPU it "
                                   "tunes for (build with `moegen build --kernels all` anywhere)")
    path = tune_model(spec, arch, out_root, bucket_list, configs, build_first=not no_build, jobs=jobs,
                      tolerance=tolerance, table_root=table_root, log=lambda m: click.echo(m, err=True),
                      min_seconds=min_seconds, warm_seconds=warm_seconds, settle_seconds=settle_seconds, reps=reps,
                      rotations=rotations)
    click.echo(str(path))


@main.command()
@_model_option
@click.option("--arch", default="sm90", show_default=True, type=click.Choice(ARCH_CHOICES))
@_with_split
@click.option("--tokens", default="1,4,16,64,256,1024,4096,16384", show_default=True,
              help="comma-separated token counts")
@click.option("--reps", type=click.IntRange(min=1), default=30, show_default=True,
              help="replay rounds per timed window (at least)")
@click.option("--rounds", type=click.IntRange(min=1), default=4, show_default=True,
              help="timed windows per library and T, the libraries taking turns (A B, B A, ...)")
@click.option("--settle-seconds", type=_SECONDS, default=0.2, show_default=True,
              help="per T, every library's graphs replay this long before the timed windows")
@click.option("--warm-seconds", type=_SECONDS, default=5.0, show_default=True,
              help="back-to-back replays of the largest T before timing: the GPU's serving clock and power")
@click.option("--compare", "compare", multiple=True, metavar="LABEL=DIR",
              help="also bench the build in DIR (same spec), interleaved per T; repeatable")
@click.option("--json", "json_out", type=_PathArg(), default=None, help="write results as JSON")
@_out_option
@_one_line_errors
def bench(model, arch, tp_size, ep_size, ep_rank, activations, tokens, reps, rounds, settle_seconds, warm_seconds, compare, json_out,
          out_root) -> None:
    """Time the built layer (CUDA-graph replay at steady state; the mean over the routing draws of each
    draw's median) against the measured floor."""
    import json

    from .artifact import atomic_write
    from .bench import bench_layers, markdown_table, measure_ceilings, to_json
    from .artifact import output_dir
    from .runtime import load
    spec = _spec(model, tp_size, ep_size, ep_rank, activations)
    token_list = _token_counts("--tokens", tokens, spec)
    _writable_file_target("--json", json_out)
    compared: dict[str, Path] = {}
    for item in compare:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise click.BadParameter(f"{item!r}: expected LABEL=DIR", param_hint="--compare")
        if label == "default" or label in compared:  # a repeated label would replace a library's rows
            raise click.BadParameter(f"{item!r}: label {label!r} is taken (the build under --out is 'default'); "
                                     "expected a label of its own per library", param_hint="--compare")
        compared[label] = Path(path)
    layers = {"default": load(output_dir(spec, arch, out_root), spec=spec)}
    for label, path in compared.items():
        # the same model and split; its activations (W4A16 or W4A8) may differ
        layers[label] = load(path, spec=spec.with_activations(_manifest_activations(path)))
    ceilings = measure_ceilings()
    click.echo(f"measured ceilings: {ceilings.read_tbs:.2f} TB/s read, {ceilings.bf16_tflops:.0f} bf16 TFLOP/s")
    rows = bench_layers(layers, token_list, ceilings, reps=reps, rounds=rounds, settle_seconds=settle_seconds,
                        warm_seconds=warm_seconds,
                        log=lambda m: click.echo(m, err=True))
    click.echo(markdown_table(rows))
    if json_out:
        atomic_write(json_out, json.dumps(to_json(rows, ceilings, spec, " ".join(sys.argv)), indent=2) + "\n",
                     user_path=True)


@main.command()
@_model_option
@click.option("--arch", default="sm90", show_default=True, type=click.Choice(ARCH_CHOICES))
@_with_split
@click.option("--tokens", default="0,1,7,33,300,2048", show_default=True, help="comma-separated token counts")
@click.option("--seed", type=click.IntRange(min=0, max=2**63 - 1), default=None, help="random seed (default: drawn and printed)")
@click.option("--kernels", "kernel_names", default=None,
              help="comma-separated kernel names: run only pairs of these (a GEMM none of whose kernels is named "
                   "runs all of its own), to isolate a failing kernel")
@_out_option
@_one_line_errors
def check(model, arch, tp_size, ep_size, ep_rank, activations, tokens, seed, kernel_names, out_root) -> None:
    """Run every kernel of the built library against the float64 reference on this GPU."""
    from .artifact import output_dir
    from .check import check_library
    from .runtime import load
    spec = _spec(model, tp_size, ep_size, ep_rank, activations)
    token_list = _token_counts("--tokens", tokens, spec)
    only = [n.strip() for n in kernel_names.split(",") if n.strip()] if kernel_names is not None else None
    if only is not None and not only:
        raise click.BadParameter("expected comma-separated kernel names", param_hint="--kernels")
    layer = load(output_dir(spec, arch, out_root), spec=spec)
    if not check_library(layer, token_list, seed=seed, log=click.echo, only=only):
        sys.exit(1)


@main.command()
@_model_option
@click.option("--arch", default="sm90", show_default=True, type=click.Choice(ARCH_CHOICES))
@_with_split
@_out_option
@_one_line_errors
def sass(model, arch, tp_size, ep_size, ep_rank, activations, out_root) -> None:
    """Audit the built library's machine code: every GEMM kernel uses the arch's tensor-core MMA, no
    kernel touches local memory (spills), and ptxas serialized no wgmmas where the config space does
    not expect it (the serializations it does expect are listed)."""
    from .artifact import output_dir
    from .sass import audit_build
    spec = _spec(model, tp_size, ep_size, ep_rank, activations)
    ok, report = audit_build(output_dir(spec, arch, out_root), spec)
    click.echo(report)
    if not ok:
        sys.exit(1)


@main.command("spec")
@click.option("--from-config", "config", required=True, type=_PathArg(),
              help="a model's published config.json (model_type deepseek_v4, deepseek_v3, deepseek_v32, kimi_k2, "
                   "glm4_moe, minimax_m2, gpt_oss or qwen3_moe)")
@click.option("--name", default=None, help="the spec's name (default: from the model directory's name)")
@click.option("--output", "-o", type=_PathArg(), default=None, help="write the YAML here, not to stdout")
@_one_line_errors
def spec_command(config, name, output) -> None:
    """Write the YAML spec of the MoE layer a config.json describes."""
    from .artifact import atomic_write
    from .hf_config import spec_from_config, spec_yaml
    if name is not None and not is_name(name):
        raise click.BadParameter(f"{shown(name)}: expected {NAME_RULE}", param_hint="--name")
    if output and _same_file(output, config):
        raise click.BadParameter(f"{output}: is the config.json being read, expected another path",
                                 param_hint="--output")
    text = spec_yaml(spec_from_config(config, name), config)
    if output:
        atomic_write(output, text, user_path=True)
        click.echo(str(output), err=True)
    else:
        click.echo(text, nl=False)


@main.command()
@_out_option
@_one_line_errors
def clean(out_root) -> None:
    """Prune the object store under OUT: objects no build's manifest under OUT names, and killed builds'
    leftovers.  Only cached objects go (a library never needs them again); builds elsewhere that share
    this store through --objects rebuild theirs."""
    from .build import clean as run
    run(out_root, log=click.echo)


if __name__ == "__main__":
    sys.exit(main())
