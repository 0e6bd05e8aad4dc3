"""The installs the README documents, each in a clean venv that holds only what it declares.

The suite's own Python has everything (``.[dev]`` and more), so a dependency an extra forgets
goes unnoticed there: ``sluice[spark]`` once lacked PyYAML, which ``spark-pipelines`` imports,
and only a user's fresh venv said so. Here a venv without system site-packages gets exactly
the distributions ``pip install 'sluice[EXTRA]'`` would bring: the requirements of
pyproject.toml, followed through every distribution's metadata (extras and markers evaluated
as pip does), linked file by file from this environment's installed copies. No download and
no copying (pyspark alone is ~500 MB): a venv takes about a second, and needs no network.
Sluice itself comes from this checkout's ``src`` (as ``pip install -e`` would).
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
import tomllib
import venv
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SCRIPTS = Path(sysconfig.get_paths()["scripts"]).resolve()


def declared(extras: tuple[str, ...]) -> list[Requirement]:
    """What ``sluice[extras]`` asks for: its dependencies and its extras' (an extra naming
    ``sluice[...]`` again is followed)."""
    wanted, seen, found = list(extras), set[str](), list[Requirement]()
    found += [Requirement(r) for r in PROJECT["dependencies"]]
    while wanted:
        extra = wanted.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in PROJECT["optional-dependencies"][extra]:
            req = Requirement(text)
            if canonicalize_name(req.name) == PROJECT["name"]:
                wanted += sorted(req.extras)
            else:
                found.append(req)
    return found


def _applies(req: Requirement, extra: str) -> bool:
    """Does ``req`` apply when its distribution is installed with ``extra`` ("" for its own
    requirements)?"""
    if req.marker is None:
        return extra == ""
    return req.marker.evaluate({"extra": extra})


def closure(roots: list[Requirement]) -> dict[str, metadata.Distribution]:
    """Every distribution installing ``roots`` brings, found installed here (by normalized
    name), each checked against every specifier that asks for it."""
    dists: dict[str, metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo = [r for r in roots if _applies(r, "")]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name not in dists:
            try:
                dists[name] = metadata.distribution(req.name)
            except metadata.PackageNotFoundError:
                pytest.fail(f"{req} is declared but not installed here: run `make setup`")
        dist = dists[name]
        assert req.specifier.contains(dist.version, prereleases=True), (
            f"{req} is declared, {name} {dist.version} is installed: run `make setup`"
        )
        provided = dist.metadata.get_all("Provides-Extra") or []
        for extra in ("", *sorted(req.extras)):
            if (name, extra) in done:
                continue
            done.add((name, extra))
            # pip only warns about an extra that does not exist: here it is a mistake
            assert not extra or extra in provided, f"{name} {dist.version} has no extra {extra!r}"
            requires = [Requirement(r) for r in dist.requires or ()]
            todo += [r for r in requires if _applies(r, extra)]
    return dists


def make_venv(path: Path, extras: tuple[str, ...]) -> Path:
    """A venv at ``path`` holding ``sluice[extras]`` and nothing else; its python."""
    venv.create(path, with_pip=False, symlinks=True)  # no system site-packages
    python = path / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    dists = closure(declared(extras))
    for name, dist in dists.items():
        files = dist.files
        assert files is not None, f"{name}: installed without a RECORD, cannot tell its files"
        for file in files:
            source = Path(os.path.normpath(str(dist.locate_file(file))))
            if file.parts[0] == "..":  # outside site-packages: scripts go to bin
                if source.parent.resolve() != SCRIPTS:
                    continue
                target = path / "bin" / file.name
            else:
                target = site / file
            if source.exists() and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(source)
    (site / "sluice-checkout.pth").write_text(f"{ROOT / 'src'}\n")
    return python


def venv_env(path: Path) -> dict[str, str]:
    """This environment minus whatever points at another Python or Spark."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "PYTHONHOME", "SPARK_HOME", "VIRTUAL_ENV"}
        and not k.startswith(("PYSPARK_", "PYENV_"))
    }
    python = str(path / "bin" / "python")
    return {
        **env,
        "PATH": f"{path / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        "VIRTUAL_ENV": str(path),
        "PYTHONNOUSERSITE": "1",
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
    }


def _python(python: Path, code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_the_requirements_are_followed_as_pip_follows_them() -> None:
    """The resolver the venvs rest on: extras add their requirements, markers are evaluated,
    and an extra that does not exist is an error, not a silent nothing."""
    names = set(closure([Requirement("pyspark[connect,pipelines]")]))
    assert {"pyspark", "py4j", "grpcio", "zstandard", "pyyaml"} <= names
    assert "pyyaml" not in set(closure([Requirement("pyspark[connect]")]))
    assert "pytest" not in names
    with pytest.raises(AssertionError, match="has no extra 'nothing'"):
        closure([Requirement("pyspark[nothing]")])


@pytest.mark.timeout(180)
def test_spark_extra_runs_spark_pipelines_in_a_clean_venv(tmp_path: Path) -> None:
    """``pip install 'sluice[spark]'`` then ``spark-pipelines``, as the README's Declarative
    Pipelines section says (its CLI imports yaml: the ``pipelines`` extra of pyspark)."""
    home = tmp_path / "venv"
    python = make_venv(home, ("spark",))
    env = venv_env(home)
    # The venv is clean: what the extra does not bring is not there.
    isolated = _python(python, "import pytest", env)
    assert "No module named 'pytest'" in isolated.stderr, isolated.stderr
    # Sluice's Spark side imports with only what the extra brings.
    imported = _python(python, "import sluice.spark, sluice.bootstrap.job, sluice.cli.main", env)
    assert imported.returncode == 0, imported.stderr
    ran = subprocess.run(
        [home / "bin" / "spark-pipelines", "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=150,
        check=False,
    )
    # spark-submit runs the CLI's Python with its stderr on stdout
    assert "Traceback" not in ran.stdout, ran.stdout
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "usage:" in ran.stdout and "run" in ran.stdout, ran.stdout


@pytest.mark.parametrize(
    ("extras", "modules", "command"),
    [
        # the README's first install: a relay on MariaDB/MySQL, tail, the console
        ((), "sluice.cli.main, sluice.capture.mysql.capture, sluice.relay", "relay"),
        (("sinks",), "sluice.sink, sluice.sink.redis, sluice.sink.nats, sluice.sink.amqp, "
         "sluice.sink.sql.target", "sink"),
        # the README's PostgreSQL section
        (("postgres",), "psycopg2, sluice.capture.postgres.capture", "relay"),
    ],
)  # fmt: skip
def test_each_documented_install_runs_in_a_clean_venv(
    tmp_path: Path, extras: tuple[str, ...], modules: str, command: str
) -> None:
    """``pip install sluice``, ``'sluice[sinks]'`` and ``'sluice[postgres]'``: every module
    they need is declared (numpy and pyarrow were not: ``No module named 'numpy'``)."""
    home = tmp_path / "venv"
    python = make_venv(home, extras)
    env = venv_env(home)
    imported = _python(python, f"import {modules}", env)
    assert imported.returncode == 0, imported.stderr
    helped = subprocess.run(
        [python, "-m", "sluice.cli.main", command, "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert helped.returncode == 0 and "usage:" in helped.stdout, helped.stderr
