"""The extras are declared once (pyproject.toml) and read from the package metadata (damc.extras.extra_of)."""

from pathlib import Path

import pytest
import tomllib

from damc.extras import MissingExtraError, extra_of, requires

ROOT = Path(__file__).resolve().parents[2]


def test_every_dependency_of_a_runtime_extra_is_known_with_its_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    known = {dist.lower(): extra for dist, extra in extra_of().values()}
    for extra in ("train", "eval", "langchain"):
        for req in extras[extra]:
            dist = req.split(">")[0].split("=")[0].split("[")[0].strip().lower()
            assert known.get(dist) == extra, f"{dist} of [{extra}] is not mapped to it: {known.get(dist)}"
    assert not any(e == "dev" for _, e in extra_of().values())   # test tools never reach a user's error message
    assert extra_of()["hydra"] == ("hydra-core", "train") and extra_of()["sklearn"] == ("scikit-learn", "train")


def test_a_missing_module_of_an_extra_names_the_install_command():
    with pytest.raises(MissingExtraError, match=r"the plots needs matplotlib.*pip install 'damc\[eval\]'"):
        with requires("the plots"):
            raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")
    with pytest.raises(ModuleNotFoundError) as e:             # not an extra's module: unchanged
        with requires("x"):
            raise ModuleNotFoundError("No module named 'nothere'", name="nothere")
    assert not isinstance(e.value, MissingExtraError)
