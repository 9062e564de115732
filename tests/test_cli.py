"""Command line: listing, and every command's early failures as one-line errors (no real build runs
here, and nothing is written outside --out)."""
import functools
import json
import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from moegen import cli, spec as spec_module
from moegen.arch import get_arch
from moegen.spec import known_models, load_model

HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"


def one_line_error(result, *fragments):
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    for f in fragments:
        assert f in errors[0], result.output


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def no_compiler(monkeypatch):
    """Any attempt to reach the toolchain fails the test: these commands must stop before it."""
    from moegen import build

    def forbidden(*args, **kwargs):
        raise AssertionError("the command went as far as building")

    monkeypatch.setattr(build, "find_toolchain", forbidden)
    monkeypatch.setattr(build, "run_build", forbidden)


def test_list(runner):
    result = runner.invoke(cli.main, ["list"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == known_models()
    q = load_model("qwen3-30b-a3b")
    assert (f"qwen3-30b-a3b: {q.num_experts} experts, top-{q.top_k}, hidden {q.hidden_size}, "
            f"intermediate {q.intermediate_size}, router softmax_topk, activation swiglu") in lines


def test_help_lists_commands(runner):
    result = runner.invoke(cli.main, ["--help"])
    assert result.exit_code == 0
    for cmd in ("build", "bench", "list"):
        assert cmd in result.output


def test_build_unknown_model(runner, no_compiler, tmp_path):
    result = runner.invoke(cli.main, ["build", "--model", "nope", "--arch", "sm90", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "Error:" in result.output
    assert "no model named 'nope'" in result.output
    for name in known_models():
        assert name in result.output
    assert not any(tmp_path.iterdir())


def test_build_unknown_arch_is_a_usage_error(runner, no_compiler, tmp_path):
    result = runner.invoke(cli.main, ["build", "--model", "deepseek-v4-flash", "--arch", "sm80",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "sm80" in result.output and "sm90" in result.output


def test_build_bad_tp(runner, no_compiler, tmp_path):
    result = runner.invoke(cli.main, ["build", "--model", "deepseek-v4-flash", "--arch", "sm90", "--tp", "48",
                                      "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "field 'parallel.tp_size' = 48" in result.output
    assert "the last rank would hold none" in result.output
    assert not any(tmp_path.iterdir())


def test_build_bad_ep_rank(runner, no_compiler, tmp_path):
    result = runner.invoke(cli.main, ["build", "--model", "qwen3-30b-a3b", "--arch", "sm90", "--ep-size", "4",
                                      "--ep-rank", "4", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "field 'parallel.ep_rank' = 4" in result.output


def test_build_bad_kernel_names(runner, no_compiler, tmp_path):
    result = runner.invoke(cli.main, ["build", "--model", "gpt-oss-20b", "--arch", "sm90", "--kernels",
                                      "moegen_sm90_gemm1_m64n16k64s3,not_a_kernel", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "kernel name 'not_a_kernel'" in result.output
    result = runner.invoke(cli.main, ["build", "--model", "gpt-oss-20b", "--arch", "sm90", "--kernels",
                                      "moegen_sm100_gemm1_m64n16k64s3", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "--kernels: moegen_sm100_gemm1_m64n16k64s3 is not an sm90 kernel" in result.output


def test_build_reaches_the_builder_with_default_configs(runner, monkeypatch, tmp_path):
    """A valid command hands the spec and the default configs to moegen.build.build (faked here)."""
    from moegen import build
    from moegen.kernel_sets import default_kernels
    seen = {}

    def fake_build(spec, arch, configs, root, jobs=None, log=print, store=None):
        seen.update(spec=spec, arch=arch, configs=configs, root=root, jobs=jobs)
        return build.BuildResult(plan=type("P", (), {"out_dir": root / spec.variant / arch})())

    monkeypatch.setattr(build, "build", fake_build)
    result = runner.invoke(cli.main, ["build", "--model", "gpt-oss-20b", "--arch", "sm90", "--tp", "2", "-j", "3",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert seen["spec"].variant == "gpt-oss-20b-tp2" and seen["arch"] == "sm90" and seen["jobs"] == 3
    assert seen["configs"] == default_kernels(seen["spec"], "sm90")
    assert seen["root"] == tmp_path
    assert result.output.strip().endswith(str(tmp_path / "gpt-oss-20b-tp2" / "sm90"))


@pytest.mark.parametrize("args, fragments", [
    (["--jobs", "-1"], ["--jobs", "-1 is not in the range x>=1"]),
    (["--jobs", "0"], ["--jobs"]),
    (["--kernels", ""], ["--kernels ''"]),
    (["--kernels", "moegen_sm90_gemm1_m64n24k64s3,moegen_sm90_gemm2_m64n8k64s3"], ["block_n = 24 is not on the sm90 axis"]),
    (["--tp", "0"], ["--tp"]),
    (["--kernels", "ALL"], ["--kernels: kernel name 'ALL'", "'default', 'all', 'shortlist'"]),
])
def test_build_bad_options_are_one_line_errors(runner, no_compiler, tmp_path, args, fragments):
    result = runner.invoke(cli.main, ["build", "--model", "deepseek-v4-flash", "--arch", "sm90",
                                      "--out", str(tmp_path / "out"), *args])
    one_line_error(result, *fragments)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("make_out, fragments", [
    (lambda tmp: tmp / "a-file", ["a-file: exists and is not a directory"]),
    (lambda tmp: "/proc/moegen", ["/proc/moegen: cannot create the output directory"]),
])
def test_build_bad_out_is_a_one_line_error(runner, monkeypatch, tmp_path, make_out, fragments):
    from moegen import build
    monkeypatch.setattr(build, "find_toolchain", lambda: build.Toolchain("nvcc", "V13.0.88", tmp_path, "4.2.0"))
    monkeypatch.setattr(build, "_cached_tree_digest", lambda root: "c" * 64)
    (tmp_path / "a-file").write_text("x")
    result = runner.invoke(cli.main, ["build", "--model", "qwen3-30b-a3b", "--arch", "sm90",
                                      "--out", str(make_out(tmp_path))])
    one_line_error(result, *fragments)


def test_build_spec_name_cannot_escape_out(runner, no_compiler, tmp_path):
    path = tmp_path / "evil.yaml"
    data = yaml.safe_load((spec_module.CONFIG_DIR / "models" / "qwen3-30b-a3b.yaml").read_text())
    path.write_text(yaml.safe_dump(dict(data, name="../../../escaped")))
    result = runner.invoke(cli.main, ["build", "--model", str(path), "--arch", "sm90", "--out", str(tmp_path / "o")])
    one_line_error(result, "evil.yaml: field 'name' = '../../../escaped'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.yaml"]


def test_list_reports_a_broken_spec_and_lists_the_others(runner, monkeypatch, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    for name in ("qwen3-30b-a3b", "gpt-oss-20b"):
        (models / f"{name}.yaml").write_text((spec_module.CONFIG_DIR / "models" / f"{name}.yaml").read_text())
    (models / "broken.yaml").write_text("name: broken\nnum_experts: [\n")
    monkeypatch.setattr(cli, "known_models", functools.partial(known_models, tmp_path))
    monkeypatch.setattr(cli, "load_model", functools.partial(load_model, config_dir=tmp_path))
    result = runner.invoke(cli.main, ["list"])
    assert result.exit_code == 1
    assert "qwen3-30b-a3b: 128 experts" in result.output and "gpt-oss-20b: 32 experts" in result.output
    one_line_error(result, "broken.yaml: not valid YAML")


@pytest.mark.parametrize("args, fragments", [
    (["--buckets", "1,x"], ["--buckets", "'1,x': expected comma-separated integers"]),
    (["--buckets", "0,4"], ["--buckets", "integers from 1 to"]),
    (["--buckets", "1," + "9" * 20], ["--buckets", "integers from 1 to 4194303", "one call of qwen3-30b-a3b"]),
    (["--tolerance", "2"], ["--tolerance"]),
    (["--kernels", "", "--no-build"], ["--kernels ''"]),
    ([], ["no CUDA GPU visible to PyTorch"]),  # this machine has none: said before any build
])
def test_tune_fails_early(runner, no_compiler, tmp_path, args, fragments):
    result = runner.invoke(cli.main, ["tune", "--model", "qwen3-30b-a3b", "--out", str(tmp_path / "o"), *args])
    one_line_error(result, *fragments)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", ["bench", "check", "sass"])
def test_commands_on_a_missing_build_are_one_line_errors(runner, tmp_path, command):
    extra = ["--tokens", "1,2"] if command != "sass" else []
    result = runner.invoke(cli.main, [command, "--model", "qwen3-30b-a3b", "--out", str(tmp_path), *extra])
    one_line_error(result, "manifest.json: no manifest; run `moegen build` first")


def test_bench_bad_tokens(runner, tmp_path):
    result = runner.invoke(cli.main, ["bench", "--model", "qwen3-30b-a3b", "--tokens", "4,-1", "--out", str(tmp_path)])
    one_line_error(result, "--tokens")


@pytest.mark.parametrize("compare", [["default=x"], ["a=x", "a=y"], ["a"]])
def test_bench_compare_labels_are_distinct(runner, tmp_path, compare):
    args = [a for c in compare for a in ("--compare", c)]
    result = runner.invoke(cli.main, ["bench", "--model", "qwen3-30b-a3b", "--tokens", "1", "--out", str(tmp_path), *args])
    one_line_error(result, "--compare")


def test_clean_on_a_root_without_a_store(runner, tmp_path):
    result = runner.invoke(cli.main, ["clean", "--out", str(tmp_path)])
    one_line_error(result, str(tmp_path / ".objects"), "no object store")
    result = runner.invoke(cli.main, ["clean", "--out", str(tmp_path / "typo")])
    one_line_error(result, "typo", "does not exist")


@pytest.mark.parametrize("args, fragments", [
    (["bench", "--model", "deepseek-v4-flash", "--tokens", "abc"], [" bench: ", "--tokens", "'abc'"]),
    (["check", "--model", "deepseek-v4-flash", "--tokens", "3000000"], ["--tokens", "from 0 to 2097151"]),
    # int() would read these as 10, 1 and a 5000-digit number
    (["check", "--model", "deepseek-v4-flash", "--tokens", "1_0"], ["--tokens", "'1_0'", "comma-separated integers"]),
    (["check", "--model", "deepseek-v4-flash", "--tokens", "\uff11"], ["--tokens", "comma-separated integers"]),
    (["check", "--model", "deepseek-v4-flash", "--tokens", "1" * 5000], ["--tokens", "(5002 chars)"]),
    (["tune", "--model", "deepseek-v4-flash", "--buckets", "1,2_0"], ["--buckets", "'1,2_0'"]),
    (["build", "--model", "deepseek-v4-flash"], [" build: ", "--arch", "sm90"]),
    (["tune", "--model", "deepseek-v4-flash", "--buckets", "0"], ["--buckets", "from 1 to"]),
    (["nosuch"], ["nosuch"]),
    (["tune", "--model", "x", "--tolerance", "nan"], ["--tolerance", "'nan'", "[0, 0.5]"]),
    (["bench", "--model", "x", "--warm-seconds", "inf"], ["--warm-seconds", "'inf'"]),
    (["check", "--model", "x", "--seed", str(10 ** 23)], ["--seed"]),
    (["spec", "--from-config", "x.json", "--name", "BAD NAME"], ["--name", "'BAD NAME'", "lower-case"]),
    (["spec", "--from-config", "x.json", "--name", "a..b"], ["--name", "'a..b'", "without '..'"]),
])
def test_usage_errors_are_one_line(runner, args, fragments):
    result = runner.invoke(cli.main, args)
    assert result.exit_code == 2 and "Usage:" not in result.output
    one_line_error(result, *fragments)


def test_spec_output_refuses_what_is_not_a_file_and_writes_through_links(runner, tmp_path):
    config = tmp_path / "m" / "config.json"
    config.parent.mkdir()
    config.write_text((HF_CONFIGS / "gpt-oss-20b.json").read_text())
    (tmp_path / "target.yaml").write_text("old")
    (tmp_path / "link.yaml").symlink_to("target.yaml")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    result = runner.invoke(cli.main, ["spec", "--from-config", str(config), "-o", str(tmp_path / "link.yaml")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "link.yaml").is_symlink() and "num_experts: 32" in (tmp_path / "target.yaml").read_text()
    for out, fragment in (("fifo", "not a regular file"), ("dir", "is a directory"),
                          ("file/x.yaml", "file is not a directory")):
        result = runner.invoke(cli.main, ["spec", "--from-config", str(config), "-o", str(tmp_path / out)])
        one_line_error(result, str(tmp_path / out), fragment, "expected")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "fifo", "file", "link.yaml", "m", "target.yaml"]


def test_default_kernels_fall_back_to_the_arch_defaults_without_tables(tmp_path):
    from moegen.kernel_sets import default_kernels
    spec = load_model("qwen3-30b-a3b").with_parallel(tp_size=4)  # no table ships for this split
    assert default_kernels(spec, "sm90", shipped_root=tmp_path) == get_arch("sm90").fallback_configs(spec)


def test_w4a8_on_sm100_is_one_line_and_writes_nothing(runner, no_compiler, tmp_path):
    result = runner.invoke(cli.main, ["build", "--model", "gpt-oss-20b", "--arch", "sm100", "--activations", "fp8",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "activations 'fp8' (W4A8) on sm100: expected arch sm90" in errors[0], result.output
    assert "Traceback" not in result.output and not any(tmp_path.iterdir())


def test_unknown_activations_are_a_usage_error(runner, no_compiler, tmp_path):
    result = runner.invoke(cli.main, ["build", "--model", "gpt-oss-20b", "--arch", "sm90", "--activations", "int8",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 2 and "'int8'" in result.output and "fp8" in result.output


def test_outputs_that_cannot_be_written_fail_before_the_work(runner, tmp_path):
    result = runner.invoke(cli.main, ["bench", "--model", "qwen3-30b-a3b", "--tokens", "1", "--json", str(tmp_path),
                                      "--out", str(tmp_path)])
    assert result.exit_code == 2 and "is a directory, expected a file path" in result.output
    config = tmp_path / "config.json"
    config.write_text((HF_CONFIGS / "qwen3-30b-a3b.json").read_text())
    before = config.read_text()
    result = runner.invoke(cli.main, ["spec", "--from-config", str(config), "-o", str(config)])
    assert result.exit_code == 2 and "is the config.json being read" in result.output and config.read_text() == before


def test_no_arguments_print_the_help(runner):
    result = runner.invoke(cli.main, [])
    assert result.exit_code == 2 and "Usage:" in result.output and "Commands:" in result.output and "Traceback" not in result.output


def test_check_kernels_must_name_some(runner, tmp_path):
    result = runner.invoke(cli.main, ["check", "--model", "qwen3-30b-a3b", "--kernels", " , ", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--kernels" in result.output and "expected comma-separated kernel names" in result.output


def test_warnings_are_one_line_without_source(runner, monkeypatch):
    import warnings

    from moegen.spec import load_model

    def spec_that_warns(*args):
        warnings.warn("a warning\nover two lines", RuntimeWarning)
        return load_model("gpt-oss-20b")

    monkeypatch.setattr(cli, "_spec", spec_that_warns)
    result = runner.invoke(cli.main, ["bench", "--model", "gpt-oss-20b", "--tokens", "abc"])
    one_line_error(result, "--tokens")
    assert "Warning: a warning over two lines" in result.output.splitlines()
    assert ".py:" not in result.output and "warnings.warn" not in result.output



def test_default_build_adds_the_picks_of_the_users_tables(runner, monkeypatch, tmp_path):
    """After `moegen tune`, `moegen build` (default kernels) keeps what the user's table picks."""
    import json

    from moegen import build
    from moegen.dispatch import GpuInfo, table_path, user_dir
    from moegen.kernel_sets import default_kernels
    from moegen.problem import ProblemKey
    from moegen.tune import make_table

    spec = load_model("gpt-oss-20b")
    shipped = default_kernels(spec, "sm90")
    space = [k for k in get_arch("sm90").candidate_configs(spec) if k not in shipped]
    g1 = next(k for k in space if k.gemm == "gemm1")
    g2 = next(k for k in space if k.gemm == "gemm2")
    gpu = GpuInfo(name="NVIDIA H100 80GB HBM3", sm_count=132, driver="580", cuda="13.0")
    table = make_table(spec, "sm90", gpu, [g1, g2], {1: (0, 1, 10.0), 16384: (0, 1, 900.0)}, [])
    path = table_path(user_dir(tmp_path), "sm90", gpu, ProblemKey.of(spec))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(table))
    seen = {}

    def fake_build(spec, arch, configs, root, jobs=None, log=print, store=None):
        seen.update(configs=configs)
        return build.BuildResult(plan=type("P", (), {"out_dir": root / spec.variant / arch})())

    monkeypatch.setattr(build, "build", fake_build)
    result = runner.invoke(cli.main, ["build", "--model", "gpt-oss-20b", "--arch", "sm90", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert set(seen["configs"]) == set(shipped) | {g1, g2}
    path.write_text("{")  # a broken user table is named and passed over, as the runtime does
    result = runner.invoke(cli.main, ["build", "--model", "gpt-oss-20b", "--arch", "sm90", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    warned = [line for line in result.output.splitlines() if line.startswith("Warning:")]
    assert len(warned) == 1 and str(path) in warned[0] and "not built" in warned[0]
    assert set(seen["configs"]) == set(shipped)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["list"], ["--help"], ["build", "--help"],
                                  ["spec", "--from-config", "tests/data/hf_configs/deepseek-v3.json", "--name", "v3"]])
def test_a_standard_output_that_fails_is_a_one_line_error(args):
    """`moegen list > /dev/full` (or into a closed pipe): one line naming standard output, no traceback."""
    import subprocess
    import sys
    root = Path(__file__).resolve().parent.parent
    with open("/dev/full", "w") as full:
        run = subprocess.run([sys.executable, "-m", "moegen", *args], stdout=full, stderr=subprocess.PIPE, text=True,
                             cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == ["Error: cannot write to standard output: No space left on device"], run.stderr


def test_a_path_error_quotes_the_path_short(runner, tmp_path):
    """An OSError about a path (here a name past the file system's 255 bytes) is '<path, cut>: <reason>'."""
    out = tmp_path / ("a" * 300)
    result = runner.invoke(cli.main, ["sass", "--model", "qwen3-30b-a3b", "--out", str(out)])
    one_line_error(result, "chars): File name too long")
    assert "[Errno" not in result.output and len(result.output) < 200
