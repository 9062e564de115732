"""Command line: listing and the build command's early failures (no real build runs here)."""
import pytest
from click.testing import CliRunner

from moegen import cli
from moegen.spec import known_models, load_model


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


def test_build_sm100_not_written_yet(runner, no_compiler, tmp_path):
    result = runner.invoke(cli.main, ["build", "--model", "deepseek-v4-flash", "--arch", "sm100",
                                      "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "Error:" in result.output
    assert "SM100" in result.output and "sm90 only" in result.output
    assert "Traceback" not in result.output
    assert not any(tmp_path.iterdir())


def test_build_unknown_arch_is_a_usage_error(runner, no_compiler, tmp_path):
    result = runner.invoke(cli.main, ["build", "--model", "deepseek-v4-flash", "--arch", "sm80",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "sm80" in result.output and "sm90" in result.output


def test_build_bad_tp(runner, no_compiler, tmp_path):
    result = runner.invoke(cli.main, ["build", "--model", "deepseek-v4-flash", "--arch", "sm90", "--tp", "3",
                                      "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "field 'parallel.tp_size' = 3" in result.output
    assert "a divisor of intermediate_size (2048)" in result.output
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
    assert "moegen_sm100_gemm1_m64n16k64s3: not an sm90 kernel" in result.output


def test_build_reaches_the_builder_with_default_configs(runner, monkeypatch, tmp_path):
    """A valid command hands the spec and the default configs to moegen.build.build (faked here)."""
    from moegen import build
    from moegen.config_space import default_configs
    seen = {}

    def fake_build(spec, arch, configs, root, jobs=None, log=print):
        seen.update(spec=spec, arch=arch, configs=configs, root=root, jobs=jobs)
        return build.BuildResult(plan=type("P", (), {"out_dir": root / spec.variant / arch})())

    monkeypatch.setattr(build, "build", fake_build)
    result = runner.invoke(cli.main, ["build", "--model", "gpt-oss-20b", "--arch", "sm90", "--tp", "2", "-j", "3",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert seen["spec"].variant == "gpt-oss-20b-tp2" and seen["arch"] == "sm90" and seen["jobs"] == 3
    assert seen["configs"] == default_configs(seen["spec"], "sm90")
    assert seen["root"] == tmp_path
    assert result.output.strip().endswith(str(tmp_path / "gpt-oss-20b-tp2" / "sm90"))
