"""A stand-in for nvcc in build tests that must run in CI in seconds: `-c SRC -o OBJ` writes the
source's bytes as the object (so an object is what its fingerprint says, and the library embeds the
build-info source with its fingerprint); `-shared -o LIB OBJ...` concatenates the objects, failing
like nvlink on a missing or empty one.  FAKE_NVCC_SLEEP (seconds, max random) widens race windows;
FAKE_NVCC_LINK_SLEEP holds the link open (to kill a build mid-link); FAKE_NVCC_CHILD_PIDS (a directory)
makes each compile wait for a child of its own, as nvcc waits for cicc and ptxas, which records both
pids there and sleeps FAKE_NVCC_CHILD_SLEEP seconds holding the output pipe (to interrupt a build).
Like nvcc, it keeps an intermediate file under TMPDIR while it runs."""
import os
import random
import subprocess
import sys
import tempfile
import time


def main(argv: list[str]) -> int:
    if "--version" in argv:
        print("Cuda compilation tools, release 13.0, V13.0.88")
        return 0
    time.sleep(random.uniform(0, float(os.environ.get("FAKE_NVCC_SLEEP", "0"))))
    out = argv[argv.index("-o") + 1]
    # as nvcc does: intermediates under TMPDIR, removed on a normal exit, left behind when killed
    scratch = os.path.join(tempfile.gettempdir(), f"tmpxft_{os.getpid():08x}_00000000-5_fake.cpp4.ii")
    with open(scratch, "w") as f:
        f.write("intermediate\n")
    try:
        return _run(argv, out)
    finally:
        os.unlink(scratch)


def _run(argv: list[str], out: str) -> int:
    pids = os.environ.get("FAKE_NVCC_CHILD_PIDS")
    if "-c" in argv and pids:
        child = subprocess.Popen([sys.executable, "-c", "import time, sys; time.sleep(float(sys.argv[1]))",
                                  os.environ.get("FAKE_NVCC_CHILD_SLEEP", "60")])
        with open(os.path.join(pids, f"{os.getpid()}-{child.pid}"), "w"):
            pass
        child.wait()
    if "-c" in argv:
        src = argv[argv.index("-c") + 1]
        with open(src, "rb") as f:
            data = f.read()
        with open(out, "wb") as f:
            f.write(data)
        print("ptxas info    : Used 42 registers, used 1 barriers")
        return 0
    if "-shared" in argv:
        objs = [a for a in argv if a.endswith(".o")]
        parts = []
        for obj in objs:
            try:
                with open(obj, "rb") as f:
                    data = f.read()
            except OSError:
                print(f"nvlink fatal   : Could not open input file '{obj}'", file=sys.stderr)
                return 1
            if not data and "-Xlinker=--no-undefined" in argv:
                print(f"undefined reference: {obj} defines nothing", file=sys.stderr)
                return 1
            parts.append(data)
        with open(out, "wb") as f:
            for p in parts:
                f.write(p)
                f.flush()
                time.sleep(float(os.environ.get("FAKE_NVCC_LINK_SLEEP", "0")))
        return 0
    print(f"fake nvcc: unexpected arguments {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
