"""Artifacts on disk: atomic writes, hashing, and manifests read back field by field."""
import json
import os

import pytest

from moegen import artifact
from moegen.artifact import ArtifactError, atomic_write, read_manifest, sha256_bytes


def test_atomic_write_creates_and_replaces(tmp_path):
    path = tmp_path / "sub" / "manifest.json"
    atomic_write(path, "first\n")
    assert path.read_text() == "first\n"
    atomic_write(path, b"\x00second")
    assert path.read_bytes() == b"\x00second"
    assert sorted(os.listdir(path.parent)) == ["manifest.json"]
    assert oct(path.stat().st_mode & 0o777) == "0o644"


class _Exploding(str):
    """A str whose encoding fails: the write never gets its bytes."""

    def encode(self, *args, **kwargs):
        raise OSError("disk full (simulated)")


def test_atomic_write_failure_keeps_old_content_and_no_temp(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text("original\n")
    with pytest.raises(ArtifactError, match=r"manifest.json: cannot write \(disk full \(simulated\)\)"):
        atomic_write(path, _Exploding("new content"))
    assert path.read_text() == "original\n"
    assert os.listdir(tmp_path) == ["manifest.json"]
    with pytest.raises(TypeError):
        atomic_write(path, ["not", "bytes"])
    assert path.read_text() == "original\n" and os.listdir(tmp_path) == ["manifest.json"]


def test_atomic_write_failure_mid_write(tmp_path, monkeypatch):
    path = tmp_path / "big.bin"
    path.write_bytes(b"old")
    real_fdopen = os.fdopen

    class HalfFile:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            raise OSError("no space left on device (simulated)")

    monkeypatch.setattr(artifact.os, "fdopen", lambda fd, mode: HalfFile(real_fdopen(fd, mode)))
    with pytest.raises(ArtifactError, match="simulated"):
        atomic_write(path, b"x" * 1000)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["big.bin"]


def test_sha256_parts_are_delimited():
    assert sha256_bytes("ab", "c") != sha256_bytes("a", "bc")
    assert sha256_bytes(b"x") == sha256_bytes("x")


GOOD = dict(schema=artifact.MANIFEST_SCHEMA, fingerprint="f" * 64, variant="tiny", arch="sm90", spec={},
            kernels=[{"name": "moegen_sm90_gemm1_m64n8k64s4"}], library="libmoegen-ffff.so", library_sha256="0" * 64,
            weight_layout="sm90_e2m1_atom64", activation_format="bf16")


@pytest.mark.parametrize("change, message", [
    (dict(schema=1), "field 'schema' = 1: expected 2"),
    (dict(kernels="x"), "field 'kernels' = 'x': expected a list of kernel entries"),
    (dict(kernels=[3]), "field 'kernels' holds 3"),
    (dict(library="../../x.so"), "expected a libmoegen-*.so file name beside it"),
    (dict(library=None), "field 'library' = None"),
    (dict(weight_layout=7), "field 'weight_layout' = 7: expected a weight layout name"),
])
def test_manifest_fields_are_checked(tmp_path, change, message):
    (tmp_path / "manifest.json").write_text(json.dumps(dict(GOOD, **change)))
    with pytest.raises(ArtifactError) as excinfo:
        read_manifest(tmp_path)
    assert message in str(excinfo.value) and str(tmp_path) in str(excinfo.value)


def test_good_manifest_and_missing_library(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(GOOD))
    m = read_manifest(tmp_path)
    assert m.kernels == ("moegen_sm90_gemm1_m64n8k64s4",) and m.library_path == tmp_path / "libmoegen-ffff.so"
    with pytest.raises(ArtifactError, match="libmoegen-ffff.so: library named by .* is missing"):
        artifact.verify_library(m)


def test_source_commit_names_this_checkout_or_the_environment(monkeypatch):
    import subprocess
    from pathlib import Path

    from moegen.artifact import source_commit
    monkeypatch.setenv("MOEGEN_COMMIT", "abc1234")
    assert source_commit() == "abc1234"
    monkeypatch.delenv("MOEGEN_COMMIT")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent).stdout.strip()
    assert source_commit() == (head or "unknown")


def test_moegen_s_own_files_replace_a_planted_link_never_write_through_it(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("not moegen's")
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").symlink_to(outside)
    (out / "dangling.log").symlink_to(tmp_path / "nowhere" / "x.log")
    atomic_write(out / "manifest.json", "{}")
    atomic_write(out / "dangling.log", "log")
    assert outside.read_text() == "not moegen's" and not (tmp_path / "nowhere").exists()
    assert not (out / "manifest.json").is_symlink() and (out / "manifest.json").read_text() == "{}"
