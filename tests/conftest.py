"""One random seed per test session for the GPU tests' inputs, shown in pytest's header and summary
(so every log has it, captured output or not); MOEGEN_TEST_SEED=<seed> repeats a run."""
import os
import random

try:
    SEED = int(os.environ.get("MOEGEN_TEST_SEED") or random.randrange(1 << 30))
except ValueError:
    raise SystemExit(f"MOEGEN_TEST_SEED = {os.environ['MOEGEN_TEST_SEED']!r}: expected an integer seed") from None
os.environ["MOEGEN_TEST_SEED"] = str(SEED)  # the GPU test modules read it at import


def pytest_report_header(config):
    return f"moegen GPU tests: seed {SEED} (MOEGEN_TEST_SEED={SEED} repeats this run)"


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(pytest_report_header(None))  # also under -q, which drops the header
