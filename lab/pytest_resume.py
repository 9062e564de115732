"""A pytest plugin for device runs that a call's time limit cuts short: with lab/ on PYTHONPATH,
`-p pytest_resume` and MOEGEN_RESUME_FILE=PATH append each passed test's node id to PATH as it passes,
and a later run given the same PATH deselects those, so calls on one warm machine go on where the last
one stopped instead of repeating it (the libraries the tests built stay on that machine too)."""
import os


def _resume_file() -> str | None:
    return os.environ.get("MOEGEN_RESUME_FILE")


def pytest_collection_modifyitems(config, items):
    path = _resume_file()
    if not path or not os.path.exists(path):
        return
    with open(path) as f:
        passed = {line.strip() for line in f}
    done = [item for item in items if item.nodeid in passed]
    if done:
        config.hook.pytest_deselected(items=done)
        items[:] = [item for item in items if item.nodeid not in passed]


def pytest_runtest_logreport(report):
    path = _resume_file()
    if path and report.when == "call" and report.passed:
        with open(path, "a") as f:
            f.write(report.nodeid + "\n")
