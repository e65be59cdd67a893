"""The heads' corpus (``specd.heads.corpus``): what it names, and what it must never take."""

from __future__ import annotations

from pathlib import Path

import pytest

from specd.heads import corpus


def _write(root: Path, rel: str, text: str = "x = 1\n") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_debian_python_leaves_out_modules_installed_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Debian package's module that is also installed in site-packages is where the benches
    draw tasks from: never trained on. Test suites are left out too."""
    site = tmp_path / "deb" / "usr/lib/python3/dist-packages"
    _write(site, "jinja2/runtime.py")
    _write(site, "fresh/core.py")
    _write(site, "fresh/tests/test_core.py")
    _write(site, "single.py")
    monkeypatch.setattr(corpus, "_deb", lambda package: tmp_path / "deb")
    monkeypatch.setattr(corpus, "DEBIAN_PYTHON", ("python3-demo",))
    monkeypatch.setattr(corpus, "installed_modules", lambda: {"jinja2"})
    names = [f.name for f in corpus.SOURCES["debian-python"]()]
    assert names == ["deb:python3-demo/fresh/core.py", "deb:python3-demo/single.py"]


def test_the_installed_modules_include_the_race_tasks_packages() -> None:
    """The guard above is only as good as this list: the test race's packages are installed here."""
    found = corpus.installed_modules()
    assert {"jinja2", "click", "pygments", "rich"} <= found
    assert "json" not in found  # the standard library is not site-packages


def test_go_leaves_out_the_quality_bench_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "deb" / corpus.GO_SRC
    for rel in ("net/http/server.go", "strings/builder.go", "fmt/print.go", "fmt/print_test.go",
                "cmd/go/testdata/x.go"):
        _write(src, rel, "package x\n")
    monkeypatch.setattr(corpus, "_deb", lambda package: tmp_path / "deb")
    assert [f.name for f in corpus.SOURCES["go"]()] == [f"deb:{corpus.GO_PACKAGE}/fmt/print.go"]


def test_an_unknown_source_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown corpus sources nope"):
        corpus.files(0, ("stdlib", "nope"))


def test_the_classic_standard_library_keeps_out_the_quality_dev_packages_and_tests() -> None:
    found = corpus.files(0, ("stdlib",))
    assert set(found) == {"python"}
    names = [f.name for f in found["python"]]
    assert names and all(n.startswith("stdlib/") for n in names)
    assert not any(n.split("/")[1] in corpus.QUALITY_DEV_STDLIB for n in names)
    assert not any("/test/" in n or "/tests/" in n for n in names)


def test_specd_heads_data_refuses_unknown_sources_and_sources_with_a_repository(tmp_path: Path) -> None:
    """Both before any model loads: a clear error, nothing stored."""
    import subprocess

    (tmp_path / "m.py").write_text("x = 1\n")
    out = tmp_path / "data"
    bad = subprocess.run(["specd", "heads", "data", "--sources", "stdlib,nope", "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "name sources from stdlib" in bad.stderr
    mixed = subprocess.run(["specd", "heads", "data", "--repo", str(tmp_path), "--sources", "go", "--out", str(out)],
                           capture_output=True, text=True, timeout=120)
    assert mixed.returncode == 1 and "with --repo the data is your repository's" in mixed.stderr
    assert not out.exists()
