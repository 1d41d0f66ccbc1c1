"""The public API is what __all__ says, each export documented (and in the README)."""

import importlib
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


@pytest.mark.parametrize("module", ["ray_adaptive", "esl", "ray_adaptive.dsl", "ray_adaptive.sim", "ray_adaptive.resources"])
def test_every_export_resolves_and_has_a_docstring(module):
    mod = importlib.import_module(module)
    assert mod.__doc__, f"{module} has no module docstring"
    for name in mod.__all__:
        obj = getattr(mod, name)
        if callable(obj):
            assert obj.__doc__ and obj.__doc__.strip(), f"{module}.{name} has no docstring"


def test_esl_classes_are_in_the_readme():
    import esl

    for name in esl.__all__:
        if name[0].isupper() and not name.endswith("Error"):
            assert f"`{name}`" in README, f"esl.{name} is not documented in the README"


def test_shipped_policies_are_in_the_readme():
    from ray_adaptive.dsl import shipped_policies

    for name in shipped_policies():
        assert f"`{name}`" in README, f"policy {name} is not documented in the README"


def test_lazy_resource_exports_match_the_resources_module():
    import ray_adaptive
    from ray_adaptive import resources

    assert set(ray_adaptive._RESOURCE_EXPORTS) <= set(resources.__all__)
